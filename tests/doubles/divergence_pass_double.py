"""TEST DOUBLE of a divergence pass: writes the divergence record `humming-matrix divergence run`
would write, from a toy model instead of a server.

The toy model: vocabulary 32, 6 answer tokens per question; the logits at (question, position)
are drawn from a generator seeded by both, so every pass sees the same model. `jitter` adds
fresh noise in each pass (seeded by `seed`: what batch shapes do to a real server, the A/A
floor); `shift` adds a fixed perturbation, the same in every pass (a changed kernel). The forced
tokens are the unperturbed model's argmax, the same in every pass, as teacher forcing makes
them.
"""

from __future__ import annotations

import math
import random
from array import array
from pathlib import Path

from humming_matrix.divergence.record import AnswerLogprobs, DivergenceRecord, pad_top
from humming_matrix.divergence.record import write_divergence_record as write_record
from humming_matrix.store.results import ConfigInfo, Timings, new_run_id, utc_now_iso
from humming_matrix.suite.config import EvalConfig

VOCAB = 32
ANSWER_TOKENS = 6
TOP_K = 5


def _logprobs(
    question: int, position: int, noise: random.Random, jitter: float, shift: float
) -> list[float]:
    base = random.Random(question * 7919 + position)
    logits = [base.gauss(0.0, 2.0) for _ in range(VOCAB)]
    fixed = random.Random(1_000_003 + question * 7919 + position)
    logits = [x + fixed.gauss(0.0, shift) + noise.gauss(0.0, jitter) for x in logits]
    top = max(logits)
    norm = top + math.log(sum(math.exp(x - top) for x in logits))
    return [x - norm for x in logits]


def _answer(question: int, noise: random.Random, jitter: float, shift: float) -> AnswerLogprobs:
    tokens, chosen, top_ids, top_lps = array("i"), array("f"), array("i"), array("f")
    for position in range(ANSWER_TOKENS):
        clean = _logprobs(question, position, random.Random(0), 0.0, 0.0)
        forced = max(range(VOCAB), key=lambda t: clean[t])
        lps = _logprobs(question, position, noise, jitter, shift)
        ranked = sorted(range(VOCAB), key=lambda t: -lps[t])
        ids, values = pad_top([(t, lps[t]) for t in ranked], TOP_K)
        tokens.append(forced)
        chosen.append(lps[forced])
        top_ids.extend(ids)
        top_lps.extend(values)
    return AnswerLogprobs(question, None, 100, tokens, chosen, top_ids, top_lps)


def write_pass(
    store: Path,
    config: EvalConfig,
    version: str,
    session: str,
    questions: int,
    *,
    seed: int,
    jitter: float = 0.02,
    shift: float = 0.0,
) -> Path:
    """One complete pass of `config` by humming-kernels `version`, into `store`."""
    noise = random.Random(seed)
    record = DivergenceRecord(
        run_id=new_run_id(),
        created=utc_now_iso(),
        complete=True,
        config=ConfigInfo(config.name, str(config.path), config.sha256, dict(config.fields)),
        environment={"humming_kernels": version, "session": session, "gpu": None},
        top_k=TOP_K,
        questions=tuple(_answer(i, noise, jitter, shift) for i in range(questions)),
        timings=Timings(None, None, 0.0),
    )
    return write_record(store, record)
