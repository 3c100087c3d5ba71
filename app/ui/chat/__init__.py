"""The chat feature: conversation list, message view (Markdown, code blocks, tint),
input box, and the batching of streamed text."""
