"""The OpenAI API subset of a 4-rank simulated cluster, through real clients."""

from __future__ import annotations

import json

import httpx
import openai

MC_PROMPT = (
    "Question: Which organ pumps blood?\nA. Liver\nB. Heart\nC. Lung\nD. Kidney\nE. Skin\nAnswer:"
)


def client(cluster) -> openai.OpenAI:
    return openai.OpenAI(base_url=cluster.url + "/v1", api_key="unused", max_retries=0, timeout=10)


def test_simple_routes(cluster):
    assert httpx.get(cluster.url + "/health").status_code == 200
    assert httpx.get(cluster.url + "/health").content == b""
    assert httpx.get(cluster.url + "/ping").status_code == 200
    assert httpx.get(cluster.url + "/version").json() == {"version": "0.33.0"}
    card = httpx.get(cluster.url + "/v1/models").json()["data"][0]
    assert card["id"] == "glm-sim" and card["owned_by"] == "vllm"
    assert card["max_model_len"] == 32000 and card["root"] == str(cluster.model)


def test_openai_completion_with_logprobs(cluster):
    resp = client(cluster).completions.create(
        model="glm-sim", prompt="Hello there", max_tokens=6, temperature=0, logprobs=3
    )
    choice = resp.choices[0]
    assert resp.usage.completion_tokens == len(choice.logprobs.tokens) <= 6
    assert resp.usage.prompt_tokens == 2
    assert "".join(choice.logprobs.tokens) == choice.text
    for tok, top in zip(choice.logprobs.tokens, choice.logprobs.top_logprobs, strict=True):
        assert tok in top and 3 <= len(top) <= 4
    again = client(cluster).completions.create(
        model="glm-sim", prompt="Hello there", max_tokens=6, temperature=0, logprobs=3
    )
    assert again.choices[0].text == choice.text  # greedy is deterministic


def test_openai_chat_with_logprobs_and_mc_letter(cluster):
    c = client(cluster)
    resp = c.chat.completions.create(
        model="glm-sim",
        max_tokens=1,
        temperature=0,
        messages=[{"role": "user", "content": MC_PROMPT}],
        logprobs=True,
        top_logprobs=5,
    )
    first = resp.choices[0].logprobs.content[0]
    letters = {t.token for t in first.top_logprobs}
    assert first.token in "ABCDE" and set("ABCDE") <= letters
    assert first.token == first.top_logprobs[0].token
    assert resp.usage.completion_tokens == 1
    again = c.chat.completions.create(
        model="glm-sim",
        max_tokens=1,
        temperature=0,
        messages=[{"role": "user", "content": MC_PROMPT}],
        logprobs=True,
        top_logprobs=5,
    )
    assert again.choices[0].logprobs.content[0].token == first.token


def test_request_kwargs_override_server_default(cluster):
    def prompt_tokens(kwargs):
        body = {
            "model": "glm-sim",
            "max_tokens": 1,
            "messages": [{"role": "user", "content": "hi"}],
        }
        if kwargs is not None:
            body["chat_template_kwargs"] = kwargs
        return httpx.post(cluster.url + "/v1/chat/completions", json=body, timeout=10).json()[
            "usage"
        ]["prompt_tokens"]

    default = prompt_tokens(None)
    assert prompt_tokens({"enable_thinking": False}) == default
    assert prompt_tokens({"enable_thinking": True}) != default


def test_lm_eval_loglikelihood_request(cluster):
    body = {
        "model": "glm-sim",
        "prompt": [MC_PROMPT + " B"],
        "max_tokens": 0,
        "echo": True,
        "logprobs": 1,
        "temperature": 0,
    }
    out = httpx.post(cluster.url + "/v1/completions", json=body, timeout=10).json()
    lp = out["choices"][0]["logprobs"]
    assert out["choices"][0]["text"] == MC_PROMPT + " B"
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == out["usage"]["prompt_tokens"]
    assert lp["tokens"][-1] == " B" and isinstance(lp["token_logprobs"][-1], float)
    assert all(1 <= len(t) <= 2 for t in lp["top_logprobs"][1:])
    # the scored continuation agrees with the first-token distribution of the context
    first = httpx.post(
        cluster.url + "/v1/completions",
        json={
            "model": "glm-sim",
            "prompt": MC_PROMPT,
            "max_tokens": 1,
            "logprobs": 5,
            "temperature": 0,
        },
        timeout=10,
    ).json()["choices"][0]["logprobs"]["top_logprobs"][0]
    assert abs(first[" B"] - lp["token_logprobs"][-1]) < 1e-9


def test_bench_style_streaming(cluster):
    body = {
        "model": "glm-sim",
        "prompt": "Tell me a story",
        "max_tokens": 12,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks, done = [], False
    with httpx.stream("POST", cluster.url + "/v1/completions", json=body, timeout=10) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                continue
            assert line.startswith("data: ")
            if line == "data: [DONE]":
                done = True
                continue
            chunks.append(json.loads(line[6:]))
    assert done
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == 12 and text
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_stop_strings_and_logprob_limits(cluster):
    r = httpx.post(
        cluster.url + "/v1/completions",
        json={"model": "glm-sim", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]},
        timeout=10,
    )
    assert r.status_code == 400 and "at most 4" in r.json()["error"]["message"]
    r = httpx.post(
        cluster.url + "/v1/chat/completions",
        json={
            "model": "glm-sim",
            "messages": [{"role": "user", "content": "x"}],
            "stop": ["a", "b", "c", "d", "e"],
        },
        timeout=10,
    )
    assert r.status_code == 400 and "at most 4" in r.text
    r = httpx.post(
        cluster.url + "/v1/completions",
        json={"model": "glm-sim", "prompt": "x", "stop": ["a", "b", "c", "d"], "max_tokens": 2},
        timeout=10,
    )
    assert r.status_code == 200
    r = httpx.post(
        cluster.url + "/v1/completions",
        json={"model": "glm-sim", "prompt": "x", "logprobs": 21},
        timeout=10,
    )
    assert r.status_code == 400 and "greater than max allowed: 20" in r.text


def test_metrics_names(cluster):
    text = httpx.get(cluster.url + "/metrics").text
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        'finished_reason="length"',
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",'
        'model_name="glm-sim",position="6"}',
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_sum",
        "vllm:e2e_request_latency_seconds_count",
    ]:
        assert name in text, name
