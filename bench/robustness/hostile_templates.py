"""Hostile chat templates through ``generate --chat``: peak memory, time, outcome.

Each template is written into a tiny llama GGUF (tokenizer.chat_template) and run in a
fresh process as ``python -m app generate --chat --model FILE --max-tokens 1 hi``, the
way a user meets it. Recorded per template: exit status, seconds, peak resident memory
of the process (``wait4``), a Python traceback or a crash, and whether the app said it
uses the plain transcript instead. Two real-world shapes (ChatML, no template) give the
baseline memory of the same command.

Usage::

    .venv/bin/python bench/robustness/hostile_templates.py [--json]

Writes ``bench/out/robustness-templates.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.robustness._run import OUT, run_app
from tests.synthetic import write_tiny_llama

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

BASELINE = {"chatml": CHATML, "no-template": None}

HOSTILE: dict[str, str] = {
    # Jinja folds constants at compile time, before any render limit (9.8 GB, MemoryError
    # without the sandbox's compile-time checks)
    "center-filter": "{{ 'x'|center(5000000000) }}",
    "format-filter": "{{ '%10000000000s'|format('x') }}",
    "percent-format": "{{ '%0999999999d' % 1 }}",  # 37 s and 3.9 GB before
    "percent-star-width": "{{ '%*d' % (999999999, 1) }}",
    "replace-growth": "{% set s = 'x' * 1000000 %}{{ s|replace('x', s) }}",  # 4.3 GB before
    "replace-doubling": "{% set ns = namespace(s='xx') %}{% for i in range(60) %}"
                        "{% set ns.s = ns.s|replace('x', 'xx') %}{% endfor %}{{ ns.s|length }}",
    "str-center": "{{ 'x'.center(5000000000) }}",
    "str-format-width": "{{ '{:>9999999999}'.format('x') }}",
    "str-format-fields": "{{ ('{0}' * 100000).format('x' * 100000) }}",
    "format-map": "{{ '{a:>9999999999}'.format_map({'a': 1}) }}",
    "str-zfill": "{{ '1'.zfill(5000000000) }}",
    "str-expandtabs": "{{ ('\t' * 1000000).expandtabs(100000) }}",
    "str-translate": "{{ ('a' * 1000000).translate({97: 'b' * 1000000}) }}",
    "join-growth": "{{ (['x' * 1000000] * 1000)|join }}",
    "concat-doubling": "{% set ns = namespace(s='😀' * 1000000) %}{% for i in range(40) %}"
                       "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "plus-accumulate": "{% set ns = namespace(l=[]) %}{% for i in range(10000) %}"
                       "{% set ns.l = ns.l + ['😀' * 1000000] %}{% endfor %}{{ ns.l|length }}",
    "output-loop": "{% set s = 'x' * 4000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
    "macro-output-loop": "{% set s = 'x' * 4000000 %}{% macro f() %}{% for i in range(1000) %}"
                         "{{ s }}{% endfor %}{% endmacro %}{{ f()|length }}",
    "indent-growth": "{{ ('x\n' * 1000000)|indent(100000) }}",
    "wordwrap-wrapstring": "{{ ('x ' * 1000000)|wordwrap(1, wrapstring='y' * 100000) }}",
    "tojson-indent": "{{ messages|tojson(indent=1000000000) }}",
    "batch-fill": "{{ [1]|batch(100000000, 'x')|list|length }}",
    "slice-many": "{{ [1]|slice(100000000)|list|length }}",
    "urlize-target": "{{ ('http://a.b ' * 100000)|urlize(target='t' * 1000000) }}",
    "lipsum": "{{ lipsum(100000000) }}",
    "repeat-string": "{{ 'x' * 10**9 }}",
    "range-list": "{{ range(10**9)|list|length }}",
    "nested-range": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x",
    "nested-strings": "{% for c in 'x' * 900000 %}{% for d in 'y' * 900000 %}{% endfor %}{% endfor %}",
    "power": "{{ 2 ** 100000000 }}",
    "power-tower": "{{ ((10 ** 1000) ** 1000) ** 1000 }}",
    "int-squaring": "{% set ns = namespace(n=10**4000) %}{% for i in range(40) %}"
                    "{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.n > 0 }}",
    "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "deep-nesting": "{{ " + "(" * 50000 + "1" + ")" * 50000 + " }}",
    "huge-source": "{# " + "x" * 2_000_000 + " #}" + CHATML,
    "sandbox-escape": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "syntax-error": "{% for %}",
    "division-by-zero": "{{ 1 / 0 }}",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--limit", type=int, default=None,
                    help="run only the baselines and the first N hostile templates (dry run)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tandem-templates-"))
    rows = []
    hostile_cases = dict(list(HOSTILE.items())[: args.limit]) if args.limit else HOSTILE
    try:
        for group, cases in (("baseline", BASELINE), ("hostile", hostile_cases)):
            for name, template in cases.items():
                model = write_tiny_llama(work / f"{name}.gguf", chat_template=template)
                o = run_app(["generate", "--chat", "--model", str(model), "--max-tokens", "1",
                             "--n-ctx", "256", "hi"], home=work / "home", timeout=args.timeout)
                fell_back = "chat template cannot be used" in o.stderr
                rows.append({
                    "group": group, "template": name, "returncode": o.returncode,
                    "seconds": round(o.seconds, 2), "peak_rss_mb": round(o.peak_rss_mb, 1),
                    "crashed": o.crashed, "traceback": o.traceback, "hung": o.hung,
                    "fell_back": fell_back,
                    "note": next((ln for ln in o.stderr.splitlines() if "chat template" in ln), "")[:240],
                })
                r = rows[-1]
                print(f"{group:8} {name:22} rc {r['returncode']:3}  {r['seconds']:6.2f} s"
                      f"  {r['peak_rss_mb']:7.1f} MB  {'fallback' if fell_back else ''}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    hostile = [r for r in rows if r["group"] == "hostile"]
    summary = {
        "hostile_templates": len(hostile),
        "crashes": sum(r["crashed"] for r in rows),
        "tracebacks": sum(r["traceback"] for r in rows),
        "hangs": sum(r["hung"] for r in rows),
        "failed_runs": sum(r["returncode"] != 0 for r in rows),
        "fell_back": sum(r["fell_back"] for r in hostile),
        "max_peak_rss_mb": max(r["peak_rss_mb"] for r in hostile),
        "baseline_peak_rss_mb": max(r["peak_rss_mb"] for r in rows if r["group"] == "baseline"),
        "max_seconds": max(r["seconds"] for r in hostile),
        "all_under_1_gb": all(r["peak_rss_mb"] < 1024 for r in rows),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "robustness-templates.json").write_text(json.dumps({"summary": summary, "templates": rows}, indent=1))
    print(json.dumps(summary if not args.json else {"summary": summary, "templates": rows}, indent=1))
    ok = not (summary["crashes"] or summary["tracebacks"] or summary["hangs"] or summary["failed_runs"])
    return 0 if ok and summary["all_under_1_gb"] else 1


if __name__ == "__main__":
    sys.exit(main())
