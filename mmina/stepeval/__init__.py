"""Step-level evaluation: teacher-forced next-action prediction over stored steps (``mmina eval-steps``)."""
from mmina.stepeval.step_report import StepReport, build_report
from mmina.stepeval.teacher_forced import (EVALUATOR, EvalConfig, EvalResult, StoredBatch, eval_steps, stored_details,
                                           stored_report)

__all__ = ["EVALUATOR", "EvalConfig", "EvalResult", "StepReport", "StoredBatch", "build_report", "eval_steps",
           "stored_details", "stored_report"]
