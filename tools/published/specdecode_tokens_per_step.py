"""Tokens per verification step of EAGLE or n-gram at K, from SpecDecode-Bench's published acceptance traces.

Provenance of ``tokens_per_step`` (and the mean prompt and output lengths) of the EAGLE and n-gram curves in
ledgers/published/specdecode-bench-batch-speedup.json. The traces are data/llama3.1-8B/combined_<dataset>.jsonl
of github.com/SpecDecode-Bench/simulator at commit 2fdccbd61b62be339fb85fd90caf43f5e8392aa6 (profiled on
H100 by the same study; not committed here). Each record's ``acc_eagle.acc_len[i]`` (``acc_ngram`` for
n-gram) is the number of tokens a step starting at output position i emits with unlimited drafts; with K
a step emits min(acc_len, K + 1), the rule of the study's own simulator (simulator.py: accepted_tokens =
min(step_gen_len, proposed + 1)). For n-gram it also prints the share of steps that carry a draft: vLLM's
n-gram proposer drafts only when the context's last tokens occurred before, with the study's settings
prompt_lookup_min 3 and prompt_lookup_max 7 (SpecDecode-Bench/vllm scripts/bench_latency.py), so a step
drafts when the last 3 tokens of prompt + generated-so-far occur earlier in it. Usage:
python tools/published/specdecode_tokens_per_step.py DATA_DIR [eagle|ngram] [K]  (default eagle 3)
"""
import json
import sys
from pathlib import Path

LOOKUP_MIN = 3  # the study's prompt_lookup_min: a shorter match never drafts, a longer one implies this one


def main(folder: str, drafter: str = "eagle", k: int = 3) -> None:
    for dataset in ("gsm8k", "cnn", "sharegpt", "instructcoder"):
        tokens = steps = drafted = 0
        prompts, outputs = [], []
        for line in (Path(folder) / f"combined_{dataset}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            acc = rec[f"acc_{drafter}"]["acc_len"]
            prompt, generated = rec["prompt_token_ids"], rec["generated_token_ids"]
            prompts.append(len(prompt))
            outputs.append(len(acc))
            context = list(prompt) + list(generated)
            seen: set[tuple[int, ...]] = set()  # the LOOKUP_MIN-grams of the context before its last one
            upto = 0  # grams starting before this index are in `seen`
            done = 1  # the first token comes from the prefill
            while done < len(acc):
                end = len(prompt) + done  # the context this step sees
                while upto < end - LOOKUP_MIN:
                    seen.add(tuple(context[upto:upto + LOOKUP_MIN]))
                    upto += 1
                drafted += tuple(context[end - LOOKUP_MIN:end]) in seen
                emitted = min(acc[done - 1], k + 1)
                done += emitted
                tokens += emitted
                steps += 1
        share = f", drafting on {drafted / steps:.3f} of steps" if drafter == "ngram" else ""
        print(f"{dataset} ({drafter}, K={k}): {len(prompts)} requests, tokens per step {tokens / steps:.3f}{share}, "
              f"prompt {sum(prompts) / len(prompts):.0f}, output {sum(outputs) / len(outputs):.0f} tokens")


if __name__ == "__main__":
    main(sys.argv[1], *(sys.argv[2:3]), *(int(a) for a in sys.argv[3:4]))
