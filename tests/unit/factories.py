"""Builders for synthetic ledgers used by unit tests (no server involved)."""

from __future__ import annotations

from specnb.ledger import (
    ArmRecord,
    PointLedger,
    Provenance,
    Sampling,
    ServerRecord,
    SpecDecode,
    WorkloadRecord,
)

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}


def ledger(arm="baseline", workload="copy", c=1, r=0, tok_s=100.0, mal=None, status="ok",
           flags=(), content_hash="sha256:aa", engine="0.32.0", temperature=0.0, sweep="t",
           kv_tokens=46592, share=None, per_user=None, computed_tok_s=None, position=None) -> PointLedger:
    spec = SPEC if arm != "baseline" else None
    if position is None:  # the sweep's order, A B | B A: the baseline first in even repeats
        position = r % 2 if arm == "baseline" else (r + 1) % 2
    sd = None
    if spec is not None and mal is not None:
        drafts = 100.0
        accepted = (mal - 1.0) * drafts
        sd = SpecDecode(num_drafts=drafts, num_draft_tokens=400.0, num_accepted_tokens=accepted,
                        accepted_per_position=[drafts] * 4, acceptance_rate=accepted / 400.0,
                        mean_acceptance_length=mal, per_position_acceptance=[1.0] * 4,
                        accepted_output_share=share)
    return PointLedger(
        status=status, sweep=sweep, point_id=f"{arm}/{workload}/c{c}-r{r}",
        arm=ArmRecord(name=arm, speculative_config=spec),
        workload=WorkloadRecord(name=workload, source="test", content_hash=content_hash,
                                num_prompts=8, categories={workload: 8}),
        concurrency=c, repeat=r, arm_position=position, num_requests=8, warmup_requests=1,
        sampling=Sampling(temperature=temperature),
        server=ServerRecord(mode="launched", base_url="http://127.0.0.1:1", model="m",
                            engine_version=engine, argv=["x"], env={},
                            kv_capacity={"total_tokens": kv_tokens}, ready_s=20.0),
        provenance=Provenance(git_sha="abc", git_dirty=False, versions={"vllm": engine},
                              hardware={"cpu_model": "test"}),
        started_at="2026-11-29T00:00:00+00:00", finished_at="2026-11-29T00:00:01+00:00",
        results=None if status != "ok" else {
            "num_requests": 8, "num_ok": 8, "num_errors": 0, "output_tok_s": tok_s,
            "per_user_decode_tok_s_mean": tok_s / c if per_user is None else per_user,
            "p50_tpot_ms": 1000.0 * c / tok_s,
            **({} if computed_tok_s is None else {"computed_tok_s_wall": computed_tok_s}),
        },
        spec_decode=sd, flags=list(flags),
    )
