#!/usr/bin/python3
"""Reference renderer for sluice's chat templates: Python jinja2, set up the way Hugging Face
transformers' apply_chat_template sets it up (src/transformers/utils/chat_template_utils.py,
_compile_jinja_template):

  * jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
    extensions=[jinja2.ext.loopcontrols])
  * globals raise_exception(message) -> raises jinja2.exceptions.TemplateError(message),
    and strftime_now(format) -> datetime.now().strftime(format)
  * filter tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    -> json.dumps(...): transformers replaces jinja2's own tojson, which would HTML-escape
    <, >, & and ' (as \\u003c ...).

Two deliberate differences, both to keep renders reproducible: strftime_now formats the
case's fixed "now" (unix seconds, UTC) instead of the local clock, and transformers'
AssistantTracker extension ({% generation %}) is left out (no tested template uses it).

The template's variables are the case's "context" object, passed as render(**context), with
its key order kept (json.load keeps it, as transformers' Python dicts do).

Usage:
  render.py TEMPLATE_FILE CASE_FILE   print the render to stdout, byte for byte; on failure
                                      print "ERROR <kind>: <message>" and exit with status 3
                                      (kind: raise_exception, or the Python exception name)
  render.py --batch LIST_FILE         LIST_FILE holds a JSON list of [template, case] paths;
                                      print a JSON list of [ok, text], one per pair (one
                                      Python start-up for a whole test run)
  render.py --regenerate              rewrite expected/<template>/<case>.txt for every
                                      templates/*.jinja x cases/*.json
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


class TemplateRaised(jinja2.exceptions.TemplateError):
    """What the template's own raise_exception() raises."""


def make_environment(now):
    def raise_exception(message):
        raise TemplateRaised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template_path, case_path):
    """Returns (ok, text): the render, or "ERROR <kind>: <message>"."""
    with open(template_path, encoding="utf-8", newline="") as f:
        source = f.read()
    with open(case_path, encoding="utf-8") as f:
        case = json.load(f)
    try:
        template = make_environment(case.get("now", 0)).from_string(source)
        return True, template.render(**case["context"])
    except TemplateRaised as e:
        return False, f"ERROR raise_exception: {e.message}"
    except Exception as e:  # noqa: BLE001 - any failure is an expected outcome here
        return False, f"ERROR {type(e).__name__}: {e}"


def regenerate():
    templates = sorted(f for f in os.listdir(os.path.join(HERE, "templates")) if f.endswith(".jinja"))
    cases = sorted(f for f in os.listdir(os.path.join(HERE, "cases")) if f.endswith(".json"))
    for t in templates:
        out_dir = os.path.join(HERE, "expected", t[: -len(".jinja")])
        os.makedirs(out_dir, exist_ok=True)
        for c in cases:
            ok, text = render(os.path.join(HERE, "templates", t), os.path.join(HERE, "cases", c))
            with open(os.path.join(out_dir, c[: -len(".json")] + ".txt"), "w", encoding="utf-8", newline="") as f:
                f.write(text)
    print(f"wrote {len(templates)} x {len(cases)} expected renders", file=sys.stderr)


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--regenerate":
        regenerate()
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "--batch":
        with open(sys.argv[2], encoding="utf-8") as f:
            pairs = json.load(f)
        results = [list(render(t, c)) for t, c in pairs]
        sys.stdout.buffer.write(json.dumps(results, ensure_ascii=True).encode("ascii"))
        return 0
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ok, text = render(sys.argv[1], sys.argv[2])
    sys.stdout.buffer.write(text.encode("utf-8"))
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
