"""Generation-free decisions ("jevlike"): ask with max_tokens=1, read the label tokens' logprobs
from the first token's top list, renormalise over the labels. No output text is parsed.

labels     label tokens in a top list -> label logprobs; renormalisation; margin (pure)
core       items, prompts, Decision, Decider (one item through the client)
client     the HTTP gateway (completions and chat; top_logprobs sized to --max-logprobs)
calibrate  temperature scaling, ECE, bins, margin gate, selective curve (pure)
stats      Wilson CI, percentiles, flips, position bias (pure)
fitted     the saved calibration applied by `tpwarden decide`
runner     batches with concurrency, summary, run directory and manifest
plots      reliability diagram and selective curve PNGs (matplotlib, control machine)
"""
