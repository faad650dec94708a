"""Pure logic of `decide`: label matching, normalisation, gate, calibration, flips, bias, CI,
and the HTTP gateway's parsing and max-logprobs retry (httpx MockTransport, no network)."""

from __future__ import annotations

import json
import math
import random

import httpx
import pytest
from tpwarden.cluster.decide import calibrate as cal
from tpwarden.cluster.decide import stats
from tpwarden.cluster.decide.client import (
    LogprobClient,
    max_logprobs_from_args,
    parse_first_token,
    parse_max_allowed,
)
from tpwarden.cluster.decide.core import (
    Decider,
    Item,
    decision_from_logprobs,
    item_from_json,
    render_prompt,
)
from tpwarden.cluster.decide.labels import (
    DecideError,
    LabelMissing,
    SplitLabel,
    label_logprobs,
    letter_labels,
    normalise,
    score_labels,
    top_two,
    yes_no_labels,
)
from tpwarden.cluster.errors import ConfigError

ABCDE = letter_labels(list("ABCDE"))


# --- labels -------------------------------------------------------------------------------------


def test_variants_of_one_label_add_up():
    top = {" A": math.log(0.4), "A": math.log(0.1), "(A": math.log(0.05), " B": math.log(0.3),
           "Ｃ": math.log(0.05), " D.": math.log(0.04), "E)": math.log(0.02), " the": -3.0}  # fmt: skip
    found = label_logprobs(top, ABCDE, 20)
    assert math.exp(found.logprobs["A"]) == pytest.approx(0.55)
    assert math.exp(found.logprobs["C"]) == pytest.approx(0.05)  # full-width form
    assert set(found.tokens["A"]) == {" A", "A", "(A"}
    assert found.mass == pytest.approx(0.96)
    probs = normalise(found.logprobs)
    assert sum(probs.values()) == pytest.approx(1.0)
    assert probs["A"] == pytest.approx(0.55 / 0.96)


def test_words_starting_with_a_label_letter_do_not_count():
    top = {" Apple": -0.1, " A": -1.0, " B": -2.0}
    found = label_logprobs(top, letter_labels(["A", "B"]), 5)
    assert found.tokens["A"] == (" A",)


def test_missing_label_is_an_error_not_zero():
    top = {" A": -0.1, " B": -2.0, " the": -4.0}
    with pytest.raises(LabelMissing) as e:
        label_logprobs(top, letter_labels(list("ABC")), 3)
    assert e.value.missing == ["C"] and "top 3" in str(e.value)
    assert "p=0.0183" in str(e.value)  # the smallest listed probability bounds the missing one


def test_split_labels_are_an_error():
    # byte pieces of circled numbers: the first piece begins every label
    with pytest.raises(SplitLabel):
        label_logprobs({"bytes:\\xe2\\x91": -0.1}, letter_labels(["①", "②"]), 5)
    # "10" split into "1" "0" while "1" is a label
    top = {str(i): -2.0 - i * 0.1 for i in range(10)}
    with pytest.raises(SplitLabel) as e:
        label_logprobs(top, score_labels(0, 10), 20)
    assert "10" in str(e.value)


def test_korean_and_yes_no_forms():
    found = label_logprobs(
        {"가": -0.2, " 나": -1.9, "다.": -3.0}, letter_labels(["가", "나", "다"]), 5
    )
    assert set(found.logprobs) == {"가", "나", "다"}
    yn = label_logprobs({" yes": -0.5, "Yes": -1.5, " No": -1.2}, yes_no_labels(), 5)
    assert math.exp(yn.logprobs["Yes"]) == pytest.approx(math.exp(-0.5) + math.exp(-1.5))


def test_temperature_and_margin():
    lps = {"A": math.log(0.6), "B": math.log(0.3), "C": math.log(0.1)}
    p1 = normalise(lps)
    assert top_two(p1) == ("A", pytest.approx(0.3))
    hot = normalise(lps, 2.0)
    assert hot["A"] < p1["A"] and sum(hot.values()) == pytest.approx(1)
    with pytest.raises(ValueError):
        normalise(lps, 0)


def test_gate_holds_exactly_items_under_threshold():
    rng = random.Random(1)
    gate = 0.2
    for i in range(200):
        a, b = rng.random(), rng.random()
        d = decision_from_logprobs(str(i), {"A": math.log(a), "B": math.log(b)}, margin_gate=gate)
        assert sum(d.probs.values()) == pytest.approx(1)
        assert (d.verdict == "hold") == (d.margin < gate)


# --- items and prompts ------------------------------------------------------------------------


def test_item_parsing_and_prompt():
    it = item_from_json(
        {"id": 7, "question": "Q?", "choices": {"A": "x", "B": "y"}, "answer": "B"}, "f:1"
    )
    assert it.id == "7" and it.answer == "B"
    assert render_prompt(it) == "Q?\nA. x\nB. y\nAnswer:"
    with pytest.raises(ConfigError):
        item_from_json({"question": "Q?", "choices": {"A": "x", "B": "y"}, "answer": "C"}, "f:2")
    with pytest.raises(ConfigError):
        item_from_json({"question": "Q?", "choices": {"A": "x"}}, "f:3")
    new, mapping = it.reordered(["B", "A"])
    assert (
        new.choices == {"A": "y", "B": "x"}
        and new.answer == "A"
        and mapping == {"A": "B", "B": "A"}
    )


# --- calibration --------------------------------------------------------------------------------


def _overconfident(n: int, seed: int = 3) -> list[cal.Example]:
    """True accuracy ~70 %, but the logits say ~97 %: the field report's shape, exaggerated."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        right = rng.random() < 0.7
        top, other = ("A", "B") if right else ("B", "A")
        lps = {top: 0.0, other: -3.5 - rng.random(), "C": -6.0 - rng.random()}
        out.append((lps, "A"))
    return out


def test_temperature_scaling_lowers_ece_on_overconfident_set():
    ex = _overconfident(300)
    rep = cal.calibrate(ex)
    assert rep.temperature > 1.5  # softens
    assert rep.ece_after < rep.ece_before / 3
    assert rep.nll_after < rep.nll_before and rep.brier_after < rep.brier_before
    assert sum(b.count for b in rep.bins_after) == 300


def test_temperature_fit_finds_the_generating_temperature():
    rng = random.Random(5)
    true_t, ex = 2.5, []
    for _ in range(3000):
        z = {k: rng.gauss(0, 3) for k in "ABCD"}
        p = normalise(z, true_t)
        r, acc, ans = rng.random(), 0.0, "D"
        for k, q in p.items():
            acc += q
            if r < acc:
                ans = k
                break
        ex.append((z, ans))
    assert cal.fit_temperature(ex) == pytest.approx(true_t, rel=0.15)


def test_ece_of_perfect_calibration_is_zero():
    bins = cal.confidence_bins([0.75] * 4, [True, True, True, False])
    assert cal.ece(bins) == pytest.approx(0.0)
    assert bins[7].count == 4 and bins[7].accuracy == 0.75


def test_gate_choice_and_selective_curve():
    margins = [0.9, 0.8, 0.7, 0.3, 0.2, 0.1, 0.05]
    correct = [True, True, True, True, False, True, False]
    curve = cal.selective_curve(margins, correct)
    assert curve[0].threshold == 0.0 and curve[0].coverage == 1.0
    assert curve[0].accuracy == pytest.approx(5 / 7)
    gate = cal.choose_gate(margins, correct, 1.0)
    assert gate.threshold == 0.3 and gate.answered == 4 and gate.accuracy == 1.0
    # the gate holds exactly the items under it
    assert sum(m < gate.threshold for m in margins) == len(margins) - gate.answered
    assert cal.choose_gate([0.1, 0.2], [False, False], 0.9) is None


# --- stats --------------------------------------------------------------------------------------


def test_wilson_matches_the_field_report_interval():
    lo, hi = stats.wilson(372, 435)  # 85.5 % of 435
    assert 0.81 < lo < 0.83 and 0.88 < hi < 0.89
    assert stats.wilson(0, 0) is None


def test_percentiles():
    xs = list(range(1, 101))
    assert stats.percentile(xs, 50) == 50 and stats.percentile(xs, 95) == 95
    assert stats.latency_summary([])["p50"] is None


def test_flips_found_and_binned_by_margin():
    r1 = {"a": ("A", 0.02), "b": ("B", 0.6), "c": ("A", 0.04), "d": ("C", 0.5)}
    r2 = {"a": ("B", 0.01), "b": ("B", 0.62), "c": ("A", 0.03), "d": ("C", 0.45)}
    flips, mm = stats.find_flips([r1, r2])
    assert [f.id for f in flips] == ["a"] and flips[0].decisions == ("A", "B")
    rows = stats.flips_by_margin(flips, mm)
    assert rows[0]["flips"] == 1 and rows[0]["items"] == 2
    assert sum(r["flips"] for r in rows[1:]) == 0


def test_position_table_and_order_consistency():
    t = stats.position_table(["A", "A", "A", "B"], ["A", "B", "C", "B"], ["A", "B", "C"])
    assert t[0] == {"label": "A", "predicted": 3, "gold": 1, "accuracy_when_gold": 1.0}
    assert stats.chi_square_uniform([3, 1, 0]) > stats.chi_square_uniform([1, 1, 2])
    mapping = {"x": {"A": "B", "B": "A"}, "y": {"A": "B", "B": "A"}}
    c = stats.order_consistency({"x": "B", "y": "A"}, {"x": "A", "y": "A"}, mapping)
    assert c["same_choice"] == 1 and c["permuted_picks_by_position"] == {"A": 2}


# --- the HTTP gateway ---------------------------------------------------------------------------


def test_max_logprobs_from_inventory_args():
    assert max_logprobs_from_args(()) == 20
    assert max_logprobs_from_args(("--max-logprobs", "50")) == 50
    assert max_logprobs_from_args(("--max-logprobs=8",)) == 8
    msg = "Requested sample logprobs of 20, which is greater than max allowed: 5"
    assert parse_max_allowed(msg) == 5


def _completion(top: dict[str, float]) -> dict:
    tok = max(top, key=top.get)
    return {"choices": [{"logprobs": {"tokens": [tok], "token_logprobs": [top[tok]],
                                      "top_logprobs": [top], "text_offset": [0]}}]}  # fmt: skip


def test_client_lowers_k_on_400_and_remembers():
    seen = []

    def handler(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        seen.append(body["logprobs"])
        if body["logprobs"] > 5:
            msg = f"Requested sample logprobs of {body['logprobs']}, which is greater than max allowed: 5"
            return httpx.Response(400, json={"error": {"message": msg, "code": 400}})
        return httpx.Response(200, json=_completion({" A": -0.2, " B": -1.8}))

    http = httpx.Client(transport=httpx.MockTransport(handler))
    client = LogprobClient("http://x", "m", k=20, http=http)
    d = Decider(client, margin_gate=0.1).decide(
        Item(id="1", question="Q?", choices={"A": "a", "B": "b"})
    )
    assert d.k == 5 and d.decision == "A" and seen == [20, 5]
    Decider(client).decide(Item(id="2", question="Q?", choices={"A": "a", "B": "b"}))
    assert seen == [20, 5, 5]


def test_client_chat_body_and_parse():
    client = LogprobClient("http://x", "m", k=7, path="chat")
    route, body = client.body("Q", 7)
    assert (
        route == "/v1/chat/completions" and body["top_logprobs"] == 7 and body["logprobs"] is True
    )
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["max_tokens"] == 1
    doc = {"choices": [{"logprobs": {"content": [{"token": "B", "logprob": -0.3, "bytes": [66],
           "top_logprobs": [{"token": "A", "logprob": -1.5, "bytes": [65]}]}]}}]}  # fmt: skip
    ft = parse_first_token(doc, "chat", 7)
    assert ft.top[0] == ("B", -0.3)  # the sampled token, outside the top list, is kept
    think = {"choices": [{"logprobs": {"content": [{"token": "<think>", "logprob": -0.01,
             "top_logprobs": []}]}}]}  # fmt: skip
    with pytest.raises(DecideError, match="thinking"):
        parse_first_token(think, "chat", 7)


def test_server_error_and_unreachable_are_decide_errors():
    def boom(req):
        return httpx.Response(500, json={"error": {"message": "engine dead"}})

    c = LogprobClient("http://x", "m", http=httpx.Client(transport=httpx.MockTransport(boom)))
    with pytest.raises(DecideError, match="HTTP 500: engine dead"):
        c.first_token("Q")

    def refuse(req):
        raise httpx.ConnectError("refused")

    c = LogprobClient("http://x", "m", http=httpx.Client(transport=httpx.MockTransport(refuse)))
    with pytest.raises(DecideError, match="ConnectError"):
        c.first_token("Q")


def test_injected_clock_gives_latency():
    ticks = iter([10.0, 10.25])
    http = httpx.Client(transport=httpx.MockTransport(
        lambda r: httpx.Response(200, json=_completion({" A": -0.1, " B": -2.0}))))  # fmt: skip
    d = Decider(LogprobClient("http://x", "m", http=http), clock=lambda: next(ticks)).decide(
        Item(id="1", question="Q?", choices={"A": "a", "B": "b"})
    )
    assert d.latency_ms == pytest.approx(250.0)
