"""Step-level evaluation: teacher-forced next-action prediction over stored steps (``mmina eval-steps``).

The names below are imported on first use (:mod:`mmina.lazy`).
"""

from typing import TYPE_CHECKING

from mmina.lazy import lazy_names

if TYPE_CHECKING:
    from mmina.stepeval.step_report import StepReport, build_report
    from mmina.stepeval.teacher_forced import (
        EVALUATOR,
        EvalConfig,
        EvalResult,
        StoredBatch,
        eval_steps,
        stored_details,
        stored_report,
    )

__all__ = [
    "EVALUATOR",
    "EvalConfig",
    "EvalResult",
    "StepReport",
    "StoredBatch",
    "build_report",
    "eval_steps",
    "stored_details",
    "stored_report",
]
__getattr__ = lazy_names(
    __name__,
    {
        "StepReport": "step_report",
        "build_report": "step_report",
        **dict.fromkeys(
            (
                "EVALUATOR",
                "EvalConfig",
                "EvalResult",
                "StoredBatch",
                "eval_steps",
                "stored_details",
                "stored_report",
            ),
            "teacher_forced",
        ),
    },
)
