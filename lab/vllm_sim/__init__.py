"""vllm_sim: a stand-in for `vllm serve` v0.33.0 (stdlib + aiohttp only; see README.md)."""
