"""The hand-made differential corpus: one trajectory per rule and quirk of the official runner.

    python -m tests.data.official.differential.cases > tests/data/official/differential/handmade.json

Each case says which rule it exercises, the outcome worked out by reading the runner's code
(``expected``: outcome, hops credited ``cnt_ans``, the numerator and denominator it adds to
the logged hop rate) and why. ``official.json`` beside it holds what the runner's own code
gave when executed on these trajectories (``harness.py``); the tests check both.
"""

from __future__ import annotations

import json
import sys
from typing import Any

WIKI = "https://library.kiwix.org/viewer#wikipedia_en_all_maxi_2024-01/A/"
SHOP = "http://localhost:7770/"


def task(eval_types: Any = ("string_match",), answers: Any = None, **fields: Any) -> dict[str, Any]:
    config = {
        "task_id": 1,
        "intent": "find it",
        "eval": {
            "eval_types": list(eval_types) if isinstance(eval_types, tuple) else eval_types,
            "reference_answers": answers if answers is not None else {"must_include": ["x"]},
            "reference_url": "",
        },
    }
    for key, value in fields.items():
        if value is not DROP:
            config[key] = value
    return config


DROP = object()


def multihop(
    procedure: Any, city: Any = "tokyo", flight: Any = "tyo", shop: Any = "", **more: Any
) -> dict[str, Any]:
    return task(procedure=procedure, city=city, flight=flight, shop=shop, **more)


def normal(must_include: Any, **more: Any) -> dict[str, Any]:
    return task(
        answers={"must_include": must_include},
        procedure=["kiwix", "event", "end"],
        city="tokyo",
        flight="tyo",
        shop="",
        **more,
    )


def steps(*pairs: tuple[str, str | None]) -> list[dict[str, Any]]:
    return [{"url": url, "action": action} for url, action in pairs]


def case(
    cid: str,
    domain: str,
    config: dict[str, Any],
    trajectory: list[dict[str, Any]],
    final_url: str | None,
    outcome: str,
    cnt_ans: int | None,
    numerator: int,
    denominator: int,
    why: str,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        "id": cid,
        "domain": domain,
        "task": config,
        "steps": trajectory,
        "final_url": final_url,
        "why": why,
        "expected": {
            "outcome": outcome,
            "cnt_ans": cnt_ans,
            "numerator": numerator,
            "denominator": denominator,
            "error": error,
        },
    }


EVENTS = "https://www.eventbrite.com/d/japan--tokyo/events/"


def two_hop_cases() -> list[dict[str, Any]]:
    return [
        case(
            "2hop/happy",
            "normal",
            normal(["eventbrite", "tokyo"]),
            steps(
                (WIKI + "Landing", "type [3] [tokyo tower] [press_enter_after=1]"),
                (WIKI + "Tokyo_Tower", f"goto [{EVENTS}]"),
                (EVENTS, f"stop [{EVENTS}]"),
            ),
            None,
            "pass",
            2,
            2,
            2,
            "run.py:339-348: the events page is not kiwix and holds must_include[0] "
            "('eventbrite'): hop 1; every item is in it and cnt_ans is 1: hop 2 on the same page. "
            "PASS is cnt_ans == 2.",
        ),
        case(
            "2hop/answer-ignored",
            "normal",
            normal(["eventbrite", "tokyo"]),
            steps((WIKI + "Landing", f"goto [{EVENTS}]"), (EVENTS, "stop [I do not know]")),
            None,
            "pass",
            2,
            2,
            2,
            "run.py:467: the 2hop PASS reads cnt_ans only; the wrong answer changes nothing.",
        ),
        case(
            "2hop/nxt-not-lowercased",
            "normal",
            normal(["Eventbrite", "tokyo"]),
            steps((WIKI + "Landing", f"goto [{EVENTS}]"), (EVENTS, f"stop [{EVENTS}]")),
            None,
            "fail",
            0,
            0,
            2,
            "run.py:310, 339: nxt = must_include[0] as written ('Eventbrite') is compared with the "
            "lower-cased URL: never found, hop 1 never credited, and hop 2 needs cnt_ans == 1 (run.py:348).",
        ),
        case(
            "2hop/kiwix-page-not-hop1",
            "normal",
            normal(["tokyo"]),
            steps((WIKI + "Landing", "click [4]"), (WIKI + "Tokyo", "stop [done]")),
            None,
            "fail",
            0,
            0,
            2,
            "run.py:339: a kiwix URL never credits hop 1, even holding must_include[0]; hop 2 "
            "(every item in the URL) then needs cnt_ans == 1 and is not credited either.",
        ),
        case(
            "2hop/hop2-later-page",
            "normal",
            normal(["eventbrite", "tokyo"]),
            steps(
                (WIKI + "Landing", "goto [https://www.eventbrite.com/]"),
                ("https://www.eventbrite.com/", f"goto [{EVENTS}]"),
                (EVENTS, "stop [done]"),
            ),
            None,
            "pass",
            2,
            2,
            2,
            "hop 1 on the eventbrite home page (no 'tokyo'), hop 2 on the Tokyo events page.",
        ),
        case(
            "2hop/only-hop1",
            "normal",
            normal(["eventbrite", "tokyo"]),
            steps(
                (WIKI + "Landing", "goto [https://www.eventbrite.com/]"),
                ("https://www.eventbrite.com/", "stop [done]"),
            ),
            None,
            "fail",
            1,
            1,
            2,
            "hop 1 only: 1 of the 2 the runner adds to its denominator.",
        ),
        case(
            "2hop/max-steps-final-page",
            "normal",
            normal(["eventbrite", "tokyo"]),
            steps(
                *[(WIKI + "Landing", f"scroll [{'down' if i % 2 else 'up'}]") for i in range(29)],
                (WIKI + "Landing", f"goto [{EVENTS}]"),
            ),
            EVENTS,
            "pass",
            2,
            2,
            2,
            "run.py:184-186: after 30 actions the loop still checks the page the 30th action "
            "reached (run.py:334-348 come before early_stop), then stops with 'Early stop: Reach max steps 30'. "
            "That page is the episode's terminal observation.",
        ),
        case(
            "2hop/empty-must-include",
            "normal",
            normal([]),
            steps((WIKI + "Landing", "stop [x]")),
            None,
            "no_result",
            0,
            0,
            0,
            "run.py:310: reference[0] of an empty list raises IndexError before "
            "all_all += cnt_cl (run.py:325): no result line and nothing added to the hop rate.",
            "IndexError('list index out of range')",
        ),
        case(
            "2hop/evaluator-raises",
            "normal",
            task(
                answers={"must_include": ["eventbrite", "tokyo"], "exact_match": None},
                procedure=["kiwix", "event", "end"],
                city="tokyo",
                flight="tyo",
                shop="",
            ),
            steps((WIKI + "Landing", f"goto [{EVENTS}]"), (EVENTS, "stop [x]")),
            None,
            "no_result",
            2,
            2,
            2,
            "The task's evaluator runs for every domain (run.py:434-440): exact_match null "
            "fails `assert isinstance(value, str)` (evaluators.py:134) after all_pass += cnt_ans (run.py:429): "
            "both hops count in the logged rate, but there is no result line.",
            "AssertionError()",
        ),
        case(
            "2hop/trip-match",
            "normal",
            task(
                eval_types=("trip_match",),
                answers={"must_include": ["eventbrite"]},
                procedure=["kiwix", "event", "end"],
                city="",
                flight="",
                shop="",
            ),
            steps((WIKI + "Landing", f"goto [{EVENTS}]"), (EVENTS, "stop [x]")),
            None,
            "no_result",
            2,
            2,
            2,
            "evaluators.py:461-462, 299-301: TripEvaluator() runs EvaluatorPartial.__init__, "
            "which raises NotImplementedError: trip_match tasks never get a result line.",
            "NotImplementedError()",
        ),
        case(
            "2hop/number-keyword",
            "normal",
            normal(["eventbrite", 2024]),
            steps((WIKI + "Landing", f"goto [{EVENTS}]"), (EVENTS, "stop [x]")),
            None,
            "no_result",
            0,
            0,
            2,
            "run.py:344-345: item.lower() on the number 2024 raises AttributeError while "
            "checking the first page: the denominator was added, the numerator was not.",
            "AttributeError(\"'int' object has no attribute 'lower'\")",
        ),
    ]


MOMONDO = "https://www.momondo.com/flight-search/sfo-tyo/2024-05-01"
HOTELS = "https://sg.trip.com/hotels/list?city=228&cityname=tokyo"


def multihop_cases() -> list[dict[str, Any]]:
    compare = ["kiwix", "momondo", "end"]
    return [
        case(
            "multihop/happy",
            "compare",
            multihop(compare),
            steps(
                (WIKI + "Landing", "click [5]"),
                (WIKI + "Tokyo_Tower", f"goto [{MOMONDO}]"),
                (MOMONDO, f"stop [{MOMONDO}]"),
            ),
            None,
            "pass",
            2,
            2,
            3,
            "run.py:362-369: the wiki article's URL holds the head 'kiwix' and the city: hop 1 by "
            "the keyword rule (the flag stays up); run.py:356-358: momondo in URL and head, flight 'tyo' in the URL: "
            "hop 2. check_list[2] == 'end': PASS. END is in the denominator (len(procedure) = 3), never the numerator.",
        ),
        case(
            "multihop/kiwix-exit-stops-all-credit",
            "compare",
            multihop(["kiwix", "hotels", "momondo", "end"]),
            steps(
                (WIKI + "Landing", "click [5]"),
                (WIKI + "Eiffel_Tower", f"goto [{HOTELS}]"),
                (HOTELS, f"goto [{MOMONDO}]"),
                (MOMONDO, "stop [x]"),
            ),
            None,
            "fail",
            1,
            1,
            4,
            "run.py:353-355: no wiki page held the city, so the wiki hop is credited on leaving "
            "it for a page with the next keyword ('hotels'), and flag = False. Every check sits under `if flag` "
            "(run.py:352): the hotels and momondo pages credit nothing.",
        ),
        case(
            "multihop/momondo-double",
            "compare",
            multihop(["momondo", "hotels", "end"]),
            steps(
                ("https://www.momondo.com/", "goto [https://www.momondo.com/flight-search/sfo-tyo/tokyo]"),
                ("https://www.momondo.com/flight-search/sfo-tyo/tokyo", "stop [x]"),
            ),
            None,
            "pass",
            2,
            2,
            3,
            "run.py:356-369: momondo with the flight code adds one, and the keyword rule, tested "
            "against the same head 'momondo', adds another (the city is in the URL): the hotels hop is skipped.",
        ),
        case(
            "multihop/flight-code-case",
            "compare",
            multihop(["momondo", "end"], flight="TYO"),
            steps(("https://www.momondo.com/", f"goto [{MOMONDO}]"), (MOMONDO, "stop [x]")),
            None,
            "fail",
            0,
            0,
            2,
            "run.py:357: flight 'TYO' as written against the lower-cased URL: never found; the "
            "keyword rule needs the city 'tokyo', not in this URL.",
        ),
        case(
            "multihop/keyword-case",
            "multi567",
            multihop(["Hotels", "end"], city=""),
            steps(("https://sg.trip.com/", f"goto [{HOTELS}]"), (HOTELS, "stop [x]")),
            None,
            "fail",
            0,
            0,
            2,
            "run.py:362: the procedure entry 'Hotels' as written is never in a lower-cased URL.",
        ),
        case(
            "multihop/city-three-words",
            "multi567",
            multihop(["hotels", "end"], city="new york city"),
            steps(
                ("https://sg.trip.com/hotels/new-york", "stop [x]"),
            ),
            None,
            "no_result",
            0,
            0,
            2,
            "run.py:363-364: fro, en = city.split(' ') with three words raises ValueError on "
            "the first page with the keyword: no result line, numerator not added.",
            "ValueError('too many values to unpack (expected 2)')",
        ),
        case(
            "multihop/city-two-words",
            "multi567",
            multihop(["hotels", "end"], city="new york"),
            steps(
                ("https://sg.trip.com/hotels/list?q=york+new", "stop [x]"),
            ),
            None,
            "pass",
            1,
            1,
            2,
            "run.py:363-366: both words anywhere in the URL, in any order.",
        ),
        case(
            "multihop/empty-city",
            "multipro",
            multihop(["hotels", "carhire", "end"], city=""),
            steps(
                ("https://sg.trip.com/hotels/", "goto [https://sg.trip.com/carhire/]"),
                ("https://sg.trip.com/carhire/", "stop [x]"),
            ),
            None,
            "pass",
            2,
            2,
            3,
            "run.py:368: '' in any URL: the keyword alone credits the hop.",
        ),
        case(
            "multihop/past-end",
            "multi567",
            multihop(["hotels", "end"], city=""),
            steps(
                ("https://sg.trip.com/hotels/", "goto [https://www.eventbrite.com/weekend]"),
                ("https://www.eventbrite.com/weekend", "stop [x]"),
            ),
            None,
            "no_result",
            2,
            2,
            2,
            "run.py:351, 362: once the head is 'end', a URL containing 'end' ('weekend') "
            "with the (empty) city credits it: cnt_ans = 2 = len(procedure). The loop ends on the stop, "
            "all_pass += 2 (run.py:429), then check_list[2] raises IndexError at the PASS check (run.py:468).",
            "IndexError('list index out of range')",
        ),
        case(
            "multihop/past-end-in-loop",
            "multi567",
            multihop(["hotels", "end"], city=""),
            steps(
                ("https://sg.trip.com/hotels/", "goto [https://www.eventbrite.com/weekend]"),
                ("https://www.eventbrite.com/weekend", "click [3]"),
                ("https://www.eventbrite.com/e/1", "stop [x]"),
            ),
            None,
            "no_result",
            2,
            0,
            2,
            "As above, but the agent goes on: the next page's now_url = check_list[2] "
            "(run.py:351) raises IndexError inside the loop, before all_pass is added: numerator 0.",
            "IndexError('list index out of range')",
        ),
        case(
            "multihop/no-end",
            "compare",
            multihop(["hotels"], city=""),
            steps(
                ("https://sg.trip.com/hotels/", "stop [x]"),
            ),
            None,
            "no_result",
            1,
            1,
            1,
            "A procedure without 'end': the hop is credited, then check_list[1] at the PASS "
            "check raises IndexError.",
            "IndexError('list index out of range')",
        ),
        case(
            "multihop/shop-home-page",
            "compare",
            multihop(["7770", "end"], city="", flight="", shop="sku-1"),
            steps((SHOP, f"goto [{SHOP}product/sku-1]"), (SHOP + "product/sku-1", "stop [x]")),
            None,
            "pass",
            1,
            1,
            2,
            "run.py:359-369: on the shop's home page the shop rule needs the shop string "
            "('sku-1', absent), but the keyword rule needs only the head '7770' and the city, which is empty: the "
            "hop is credited on the home page, before the product was found.",
        ),
        case(
            "multihop/shop-7770-double",
            "compare",
            multihop(["kiwix", "7770", "end"], city="", flight="", shop="sku-1"),
            steps((WIKI + "Landing", f"goto [{SHOP}product/sku-1]"), (SHOP + "product/sku-1", "stop [x]")),
            None,
            "no_result",
            3,
            3,
            3,
            "The wiki landing page credits the wiki hop by the keyword rule ('kiwix' in the "
            "URL, empty city; the flag stays up). On the product page, head '7770': the shop rule adds one and the "
            "keyword rule another: cnt_ans = 3 = len(procedure), all_pass += 3, then check_list[3] raises at the "
            "PASS check. A perfect run of this task can never get a result line.",
            "IndexError('list index out of range')",
        ),
        case(
            "multihop/answer-ignored",
            "multi567",
            multihop(["hotels", "end"]),
            steps(("https://sg.trip.com/", f"goto [{HOTELS}]"), (HOTELS, "stop [wrong]")),
            None,
            "pass",
            1,
            1,
            2,
            "run.py:468: the multihop PASS is check_list[cnt_ans] == 'end'; the answer is unread.",
        ),
        case(
            "multihop/kiwix-last",
            "compare",
            multihop(["kiwix"], city="paris"),
            steps((WIKI + "Landing", "goto [https://example.org/]"), ("https://example.org/", "stop [x]")),
            None,
            "no_result",
            0,
            0,
            1,
            "run.py:353: on leaving the wiki, check_list[cnt_ans + 1] of a procedure that "
            "ends with 'kiwix' raises IndexError.",
            "IndexError('list index out of range')",
        ),
        case(
            "multihop/missing-city",
            "multipro",
            multihop(["hotels", "end"], city=DROP),
            steps(
                ("https://sg.trip.com/", "stop [x]"),
            ),
            None,
            "no_result",
            0,
            0,
            0,
            "run.py:316: data['city'] raises KeyError before all_all += cnt_cl.",
            "KeyError('city')",
        ),
        case(
            "multihop/null-flight",
            "compare",
            multihop(["momondo", "end"], flight=None),
            steps(
                ("https://www.momondo.com/", "stop [x]"),
            ),
            None,
            "no_result",
            0,
            0,
            2,
            "run.py:357: None in a string raises TypeError, only on a momondo page with the momondo head.",
            "TypeError(\"'in <string>' requires string as left operand, not NoneType\")",
        ),
    ]


def single_hop_cases() -> list[dict[str, Any]]:
    return [
        case(
            "singlehop/must-include",
            "shopping",
            task(answers={"must_include": ["Black", "white"]}),
            steps(
                (SHOP, "stop [It comes in black and WHITE]"),
            ),
            None,
            "pass",
            0,
            0,
            1,
            "evaluators.py:137-141: each item, lower-cased, in the lower-cased answer. The "
            "single-hop rule set checks no page: numerator 0 of denominator 1 whatever happens.",
        ),
        case(
            "singlehop/exact-quotes",
            "wikipedia",
            task(answers={"exact_match": "'1958'"}),
            steps(
                (WIKI + "Tokyo_Tower", 'stop ["1958"]'),
            ),
            None,
            "pass",
            0,
            0,
            1,
            "evaluators.py:120-125: one pair of quotes off each side, lower-cased, then equal.",
        ),
        case(
            "singlehop/whitespace-kept",
            "wikipedia",
            task(answers={"exact_match": "1958"}),
            steps(
                (WIKI + "Tokyo_Tower", 'stop ["1958 "]'),
            ),
            None,
            "fail",
            0,
            0,
            1,
            "clean_answer strips quotes, not spaces: '1958 ' != '1958'.",
        ),
        case(
            "singlehop/url-exact-final-page",
            "shopping",
            task(eval_types=("url_match",), answers={}, eval_extra=None),
            steps((SHOP, f"goto [{SHOP}product/sku-1/]"), (SHOP + "product/sku-1/", "stop [done]")),
            None,
            "pass",
            0,
            0,
            1,
            "evaluators.py:193-207: page.url (the last page) without its trailing '/' equals "
            "the reference URL.",
        ),
        case(
            "singlehop/url-gold-in-pred",
            "shopping",
            task(eval_types=("url_match",), answers={}),
            steps((SHOP, f"goto [{SHOP}product/sku-1?x=1]"), (SHOP + "product/sku-1?x=1", "stop [done]")),
            None,
            "pass",
            0,
            0,
            1,
            "evaluators.py:208-212: url_note 'GOLD in PRED': the reference is a substring.",
        ),
        case(
            "singlehop/url-note-unknown",
            "shopping",
            task(eval_types=("url_match",), answers={}),
            steps(
                (SHOP, "stop [done]"),
            ),
            None,
            "no_result",
            0,
            0,
            1,
            "evaluators.py:213-214: another url_note raises ValueError.",
            "ValueError('Unknown matching rule: FUZZY')",
        ),
        case(
            "singlehop/early-stop-answer",
            "shopping",
            task(answers={"must_include": ["30"]}),
            steps(*[(SHOP + f"p{i}", f"click [{i + 10}]") for i in range(30)]),
            SHOP + "p30",
            "pass",
            0,
            0,
            1,
            "run.py:376: the early stop's answer is its message, 'Early stop: Reach max steps 30', "
            "and the string evaluator reads it like any answer: it includes '30'.",
        ),
        case(
            "singlehop/parse-failures",
            "wikipedia",
            task(answers={"must_include": ["parse"]}),
            steps(
                (WIKI + "A", None), (WIKI + "A", "click [e5]"), (WIKI + "A", None), (WIKI + "A", "stop [x]")
            ),
            None,
            "pass",
            0,
            0,
            1,
            "run.py:192-201: three NONE actions in a row ('click [e5]' does not parse: ids "
            "are digits, actions.py:1538) stop the episode with 'Early stop: Failed to parse actions for 3 times', "
            "before the recorded stop.",
        ),
        case(
            "singlehop/same-action",
            "wikipedia",
            task(answers={"must_include": ["same action"]}),
            steps(
                (WIKI + "A", "scroll [down]"),
                (WIKI + "A", "scroll [down]"),
                (WIKI + "A", "scroll [down]"),
                (WIKI + "A", "stop [x]"),
            ),
            None,
            "pass",
            0,
            0,
            1,
            "run.py:213-221: the last three actions equivalent: 'Early stop: Same action for 3 times'.",
        ),
        case(
            "singlehop/typing-anywhere",
            "shopping",
            task(answers={"must_include": ["typing"]}),
            steps(
                (SHOP, "type [5] [a] [press_enter_after=1]"),
                (SHOP + "a", "click [9]"),
                (SHOP + "b", "type [5] [b] [press_enter_after=1]"),
                (SHOP + "c", "scroll [down]"),
                (SHOP + "d", "type [5] [c] [press_enter_after=0]"),
                (SHOP + "e", "stop [x]"),
            ),
            None,
            "pass",
            0,
            0,
            1,
            "run.py:222-228 and actions.py:295-297: type actions compare the element id only, over "
            "the whole episode: the third type into [5] stops it ('Same typing action for 3 times').",
        ),
        case(
            "singlehop/multiline-answer",
            "wikipedia",
            task(answers={"must_include": ["1958"]}),
            steps(
                (WIKI + "A", "stop [1958\nbuilt]"),
            ),
            None,
            "fail",
            0,
            0,
            1,
            "actions.py:1616: `stop ?\\[(.+)\\]` does not cross a line break: the answer is ''.",
        ),
        case(
            "singlehop/no-stop-recorded",
            "shopping",
            task(answers={"must_include": ["x"]}),
            steps(
                (SHOP, "click [3]"),
            ),
            SHOP + "next",
            "fail",
            0,
            0,
            1,
            "The recording ends without a stop (an mmina budget or error) and the runner's "
            "early_stop does not fire: the recorded agent has nothing more and stops with an empty answer.",
        ),
        case(
            "singlehop/must-include-string",
            "shopping",
            task(answers={"must_include": "black"}),
            steps(
                (SHOP, "stop [black]"),
            ),
            None,
            "no_result",
            0,
            0,
            1,
            "evaluators.py:138: must_include must be a list.",
            "AssertionError()",
        ),
        case(
            "singlehop/unknown-eval-type",
            "wikipedia",
            task(eval_types=("string_match", "llm_match")),
            steps(
                (WIKI + "A", "stop [x]"),
            ),
            None,
            "no_result",
            0,
            0,
            1,
            "evaluators.py:463-464: an unknown eval type raises ValueError when the evaluators are built.",
            "ValueError('eval_type llm_match is not supported')",
        ),
        case(
            "singlehop/no-task-id",
            "wikipedia",
            task(task_id=DROP),
            steps(
                (WIKI + "A", "stop [x]"),
            ),
            None,
            "no_result",
            None,
            0,
            0,
            "helper_functions.py:128 (RenderHelper) and run.py:274 read task_id first: "
            "KeyError, nothing counted.",
            "KeyError('task_id')",
        ),
    ]


def fix_ups(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fields a case needs beyond the helpers' defaults."""
    by_id = {c["id"]: c for c in cases}
    by_id["singlehop/url-exact-final-page"]["task"]["eval"]["reference_url"] = SHOP + "product/sku-1"
    by_id["singlehop/url-exact-final-page"]["task"].pop("eval_extra")
    gold = by_id["singlehop/url-gold-in-pred"]["task"]["eval"]
    gold["reference_url"], gold["url_note"] = "product/sku-1 |OR| product/sku-2", "GOLD in PRED"
    by_id["singlehop/url-note-unknown"]["task"]["eval"].update(reference_url=SHOP, url_note="FUZZY")
    by_id["singlehop/no-task-id"]["task"].pop("task_id", None)
    return cases


def corpus() -> dict[str, Any]:
    return {
        "about": __doc__.splitlines()[0],
        "trajectories": fix_ups(two_hop_cases() + multihop_cases() + single_hop_cases()),
    }


if __name__ == "__main__":
    json.dump(corpus(), sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
