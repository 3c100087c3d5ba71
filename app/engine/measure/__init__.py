"""Measurement of what speculation buys (no Qt): prompt sets (:mod:`.prompts`), the
benchmark runner and its summaries (:mod:`.bench`), the k sweep (:mod:`.sweep`), the race
(:mod:`.race`) and the prompt-lookup hit-rate estimate (:mod:`.lookup`). Everything here
returns numbers; the window and the command line word them."""
