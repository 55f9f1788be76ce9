"""The teacher-forced texts: vLLM's GSM8K prompt for a question followed by its reference answer.

The continuation is written exactly as the few-shot examples in the same prompt write theirs
(`Answer:{gen_prefix} {answer}`), so the model scores the reference answer in the format it was
shown. Only the logprobs of the answer's tokens are kept; the prompt itself is the same in every
run and says nothing a kernel change does not also show in the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from humming_matrix.suite import gsm8k


@dataclass(frozen=True)
class ForcedText:
    index: int
    prompt: str  # vLLM's GSM8K prompt, ending in "Answer:" (and gen_prefix)
    answer: str  # what follows it: a space and the reference answer

    @property
    def text(self) -> str:
        return self.prompt + self.answer


def forced_texts(num_questions: int, num_fewshot: int, gen_prefix: str = "") -> list[ForcedText]:
    prompts = gsm8k.build_prompts(num_questions, num_fewshot, gen_prefix)
    test = list(gsm8k.read_jsonl(gsm8k.data_file("test.jsonl")))
    return [ForcedText(p.index, p.text, f" {test[p.index].answer}") for p in prompts]
