"""The store report: one model, renderers for text, Markdown, JUnit and HTML."""
