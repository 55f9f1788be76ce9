"""The divergence tier: teacher-forced token logprobs of GSM8K reference answers, compared
between two runs question by question (docs/divergence.md).

One concept per module: `teacher` (the forced texts), `record` (what a pass stores), `asking`
(the requests to vLLM's completions API), `passes` (a pass against a launched or given server),
`metrics` (per-question divergence between two passes), `judge` (paired test against the A/A
floor, Holm across the family), `render` (text, Markdown, JUnit and HTML sections).
"""
