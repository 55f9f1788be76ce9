"""The child process that runs lm-eval: `python -m humming_matrix.lmeval.worker REQUEST OUTPUT`.

The only module that imports lm-eval. It runs in its own process so that lm-eval's import cost,
logging, warnings, global seeds and Hugging Face settings stay out of the caller, and so the
caller can stop it (process group) like any other child. REQUEST is JSON written by
`humming_matrix.lmeval.suite`; OUTPUT receives lm-eval's results and its logged samples, slimmed
to what a record keeps (no documents, no prompts: their hashes are kept instead).

Exit status: 0 done, 2 the request names a task lm-eval does not know (a config error), anything
else a failure whose traceback is on stderr.
"""

from __future__ import annotations

import importlib
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from humming_matrix.store.atomic_files import replace_file

EXIT_UNKNOWN_TASK = 2


def slim_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """One logged sample as the record keeps it: the outcome of each metric under one filter."""
    metric_names = [str(m) for m in sample.get("metrics", [])]
    resps = sample.get("resps") or [[""]]
    filtered = sample.get("filtered_resps") or [""]
    first_resp = resps[0][0] if resps and isinstance(resps[0], list) and resps[0] else ""
    return {
        "doc_id": sample["doc_id"],
        "filter": sample["filter"],
        "target": str(sample.get("target", "")),
        "prediction": str(filtered[0]) if filtered else "",
        "output": str(first_resp),
        "values": {name: sample[name] for name in metric_names if name in sample},
        "prompt_hash": sample.get("prompt_hash", ""),
    }


def run(request: dict[str, Any]) -> dict[str, Any]:
    lm_eval: Any = importlib.import_module("lm_eval")
    task_module: Any = importlib.import_module("lm_eval.tasks")
    manager = task_module.TaskManager(
        include_path=request["include_path"], include_defaults=request["include_defaults"]
    )
    unknown = [t for t in request["tasks"] if t not in manager.all_tasks]
    if unknown:
        print(f"lm-eval knows no task named {', '.join(unknown)}", file=sys.stderr)
        sys.exit(EXIT_UNKNOWN_TASK)
    results = lm_eval.simple_evaluate(
        model=request["model"],
        model_args=request["model_args"],
        tasks=request["tasks"],
        num_fewshot=request["num_fewshot"],
        limit=request["limit"],
        batch_size=1,
        gen_kwargs=request["gen_kwargs"],
        apply_chat_template=request["apply_chat_template"],
        fewshot_as_multiturn=request["fewshot_as_multiturn"],
        log_samples=True,
        task_manager=manager,
        use_cache=request["use_cache"],
    )
    return {
        "lm_eval_version": metadata.version("lm-eval"),
        "results": results["results"],
        "n-samples": results.get("n-samples", {}),
        "samples": {
            task: [slim_sample(s) for s in samples] for task, samples in results["samples"].items()
        },
    }


def main(argv: list[str]) -> int:
    request_path, output_path = Path(argv[0]), Path(argv[1])
    output = run(json.loads(request_path.read_text(encoding="utf-8")))
    # numpy scalars and the like: lm-eval's own output writer stringifies them too.
    replace_file(
        output_path,
        lambda fh: json.dump(
            output, fh, default=lambda o: o.item() if hasattr(o, "item") else str(o)
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
