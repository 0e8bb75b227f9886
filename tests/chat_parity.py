#!/usr/bin/env python3
"""Chat template parity: pllm's Jinja interpreter against Python jinja2 set up the way Hugging
Face transformers' apply_chat_template sets it up (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols and the {% generation %} tag; tojson as json.dumps
with ensure_ascii=False; raise_exception; strftime_now; render variables messages, tools=None,
documents=None, add_generation_prompt and the special tokens).

Renders every template x every conversation x add_generation_prompt in both and requires
byte-identical text; when jinja2 raises, pllm must fail too, with the same message for
raise_exception. Templates: every real one in $PLLM_SHARED_DATA/tokenizers (ollama index,
mistral.rs, phi-3-mini, qwen2.5-instruct), the SmolLM2 template stored in the default model's
GGUF, and extra templates written here to cover the interpreter more broadly. Then
differential fuzzing, fresh each run (seed printed; PLLM_CHAT_SEED=n replays a run,
PLLM_CHAT_FUZZ=n sets the count per kind, default 400): random expressions over the
supported grammar, random numbers through arithmetic/round/int/tojson, and random nested
block structures with random whitespace and whitespace control.

    python3 tests/chat_parity.py path/to/chat_tool
"""
import copy
import glob
import json
import os
import random
import subprocess
import sys
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("chat_parity: Python jinja2 is required (pip install jinja2)", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------- the reference environment

class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}: with no tracker active it
    renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()


_COMPILED = {}


def py_render(template, messages, agp, bos, eos, enable_thinking=None):
    """('ok', text) | ('raise', message) | ('error', description)"""
    t = _COMPILED.get(template)
    if t is None:
        try:
            t = ENV.from_string(template)
        except Exception as e:  # syntax / unknown filter: jinja2 fails at compile time
            t = e
        _COMPILED[template] = t
    if isinstance(t, Exception):
        return ("error", f"{type(t).__name__}: {t}")
    kwargs = {}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    try:
        # jinja2 filters can mutate arguments (indent does `s += "\n"`): render a private copy
        messages = copy.deepcopy(messages)
        text = t.render(messages=messages, tools=None, documents=None, add_generation_prompt=agp, **kwargs)
        text.encode("utf-8")  # lone surrogates cannot be output
        return ("ok", text)
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return ("raise", str(e))
        return ("error", f"{type(e).__name__}: {e}")
    except Exception as e:
        return ("error", f"{type(e).__name__}: {e}")


# ---------------------------------------------------------------- templates

def shared_data():
    d = os.environ.get("PLLM_SHARED_DATA") or os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
    d = os.path.join(d, "tokenizers")
    if not os.path.isdir(d):
        print(f"chat_parity: test data not found at {d} (set PLLM_SHARED_DATA)", file=sys.stderr)
        sys.exit(1)
    return d


def real_templates():
    d = shared_data()
    out = []
    for f in sorted(glob.glob(os.path.join(d, "chat-templates", "ollama-index-extracted", "*.jinja"))):
        with open(f, encoding="utf-8") as fh:
            out.append(("ollama/" + os.path.basename(f), fh.read()))
    for f in sorted(glob.glob(os.path.join(d, "chat-templates", "mistral.rs", "*.json"))):
        with open(f, encoding="utf-8") as fh:
            out.append(("mistral.rs/" + os.path.basename(f), json.load(fh)["chat_template"]))
    for name in ("phi-3-mini", "qwen2.5-instruct"):
        with open(os.path.join(d, name, "tokenizer_config.json"), encoding="utf-8") as fh:
            out.append((name, json.load(fh)["chat_template"]))
    n_ollama = sum(1 for n, _ in out if n.startswith("ollama/"))
    if n_ollama != 37:
        print(f"chat_parity: expected 37 ollama templates, found {n_ollama}", file=sys.stderr)
        sys.exit(1)
    home = os.environ.get("PLLM_HOME") or os.path.expanduser("~/.cache/pllm")
    gguf_path = os.path.join(home, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(gguf_path):
        print(f"chat_parity: default model missing: {gguf_path} (run scripts/setup.sh)", file=sys.stderr)
        sys.exit(1)
    import gguf  # noqa: E402  (only needed here)

    r = gguf.GGUFReader(gguf_path)
    field = r.fields["tokenizer.chat_template"]
    out.append(("gguf/SmolLM2-135M-Instruct", bytes(field.parts[field.data[0]]).decode("utf-8")))
    return out


# Templates written for this test: they exercise what the real ones do not.
EXTRA = {
    "loop-vars": """{% for m in messages %}{{ loop.index }}/{{ loop.length }} {{ loop.index0 }} {{ loop.revindex }} {{ loop.revindex0 }} first={{ loop.first }} last={{ loop.last }} {{ m.role|upper }}: {{ m.content }}
{% if loop.previtem is defined %}prev={{ loop.previtem.role }}{% endif %}{% if loop.nextitem is defined %} next={{ loop.nextitem.role }}{% endif %} {{ loop.cycle('odd', 'even') }} {{ loop.changed(m.role) }}
{% else %}no messages
{% endfor %}""",
    "namespace": """{%- set ns = namespace(system='', n_user=0, last_role=none, found=false) -%}
{%- for m in messages -%}
  {%- if m['role'] == 'system' -%}{%- set ns.system = ns.system ~ m['content'] -%}{%- set ns.found = true -%}
  {%- elif m['role'] == 'user' -%}{%- set ns.n_user = ns.n_user + 1 -%}{%- endif -%}
  {%- set ns.last_role = m.role -%}
{%- endfor -%}
sys=[{{ ns.system }}] users={{ ns.n_user }} last={{ ns.last_role }} found={{ ns.found }} {{ ns.missing is defined }}""",
    "slices": """{{ messages[1:]|length }} {{ messages[-1:]|map(attribute='role')|join(',') }} {{ messages[::-1]|map(attribute='role')|list }}
{% for m in messages %}{{ m.content[:5] }}|{{ m.content[-3:] }}|{{ m.content[::2] }}|{{ m.content[1:-1] }}|{{ m.content[::-1] }}|{{ m.content[10:2:-2] }}
{% endfor %}""",
    "filters": """{% for m in messages %}[{{ m.content|trim }}][{{ m.content|upper }}][{{ m.content|lower }}][{{ m.content|title }}][{{ m.content|capitalize }}][{{ m.content|length }}][{{ m.content|replace('o', '0') }}][{{ m.content|replace('l', 'L', 1) }}][{{ m.content|first }}][{{ m.content|last }}][{{ m.content|reverse }}][{{ m.content|list|length }}]
{% endfor %}{{ messages|map(attribute='role')|unique|list }} {{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='content')|map('length')|list }} {{ messages|map(attribute='content')|select|list|length }}
{{ messages|map(attribute='role')|sort|join(' ') }} {{ messages|sort(attribute='content')|map(attribute='role')|join(',') }} {{ messages|sort(attribute='role,content', reverse=true)|map(attribute='content')|map('trim')|join('|') }}
{{ messages|map(attribute='role')|min }} {{ messages|map(attribute='role')|max }} {{ messages|max(attribute='content') is defined }} {{ [3, 1, 2]|sum }} {{ messages|sum(attribute='missing', start=0) if false else 0 }}
{{ (messages|first).role if messages else 'none' }} {{ (messages|last).content|default('x') if messages else '' }} {{ messages|map(attribute='nope', default='dflt')|list }}""",
    "tojson": """{{ messages|tojson }}
{{ messages|tojson(indent=2) }}
{{ messages|tojson(indent='\\t', sort_keys=true) }}
{{ {'b': [1, 2.5, none, true, false], 'a': {'nested': 'é"\\n\\u0001'}}|tojson(separators=(',', ':')) }}
{{ messages|tojson(ensure_ascii=true) }} {{ [1e100, 0.1, -0.0, 3.0, 1e-7]|tojson }} {{ 'x'|tojson }} {{ none|tojson }} {{ [(1, 2)]|tojson }}""",
    "macros": """{%- macro render(m, prefix='> ', upper=false) -%}
{{ prefix }}{% if upper %}{{ m.content|upper }}{% else %}{{ m.content }}{% endif %}{{ caller_suffix|default('') }}
{%- endmacro -%}
{%- macro count_down(n) -%}{{ n }}{% if n > 0 %},{{ count_down(n - 1) }}{% endif %}{%- endmacro -%}
{%- for m in messages -%}
{{ render(m) }}|{{ render(m, '# ') }}|{{ render(m, upper=true) }}|{{ render(prefix='* ', m=m) }}
{% endfor -%}
{{ count_down(messages|length) }}""",
    "string-methods": """{% for m in messages %}{{ m.content.strip() }}|{{ m.content.lstrip() }}|{{ m.content.rstrip() }}|{{ m.content.strip('! .') }}|{{ m.content.split() }}|{{ m.content.split(' ', 1) }}|{{ m.content.rsplit(None, 1) }}|{{ m.content.splitlines() }}|{{ m.content.startswith('H') }}|{{ m.content.endswith(('?', '.')) }}|{{ m.content.upper() }}|{{ m.content.lower() }}|{{ m.content.title() }}|{{ m.content.capitalize() }}|{{ m.content.replace(' ', '_') }}|{{ m.content.find('o') }}|{{ m.content.rfind('o') }}|{{ m.content.count('l') }}|{{ '-'.join(m.content.split()) }}|{{ m.content.removeprefix('He') }}|{{ m.content.isspace() }}|{{ m.content.islower() }}|{{ m.content.isupper() }}|{{ m.role.title() }}
{% endfor %}""",
    "nested-conditions": """{% for m in messages %}{% if m.role == 'user' %}{% if loop.first %}U0{% elif loop.last and add_generation_prompt %}Ulast{% else %}U{% endif %}{% elif m.role == 'assistant' %}{% if m.content is string and m.content|length > 10 %}Along{% elif not m.content %}Aempty{% else %}A{% endif %}{% elif m.role in ['system', 'developer'] %}S{% else %}{{ raise_exception('unknown role ' ~ m.role) }}{% endif %}{{ '|' if not loop.last }}{% endfor %}
{{ 'gen' if add_generation_prompt else 'nogen' }} {{ messages|length is odd }} {{ messages|length is divisibleby 3 }} {{ (messages|length > 2) and 'many' or 'few' }} {{ bos_token is defined }} {{ bos_token is none }} {{ tools is none }} {{ documents is defined }}""",
    "break-continue": """{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ m.role }};{% if loop.index >= 3 %}{% break %}{% endif %}{% endfor %}
{% for i in range(10) if i is even %}{{ i }}{% if i > 5 %}{% break %}{% endif %}{% endfor %} {% for i in range(3, 12, 4) %}{{ i }}{% endfor %} {{ range(5)|list }} {{ range(2, 0)|list }}""",
    "whitespace": """  {% if messages %}
    lead
  {%- endif %}
  {%+ if true %}keep{% endif %}
{# comment #}
  {#- trimmed comment -#}
  x {{- ' dash ' -}} y
{% for m in messages %}
    {{ m.role }}
{% endfor %}
{%- raw %}{{ not rendered }}{% endraw %}
tail   {%- if true +%}
after plus
{% endif -%}
   end""",
    "set-blocks": """{% set header %}{% for m in messages %}{{ m.role[0] }}{% endfor %}{% endset %}[{{ header }}]
{% set shout | upper | trim %}  {{ messages|length }} messages  {% endset %}[{{ shout }}]
{% filter upper %}{% for m in messages %}{{ m.role }} {% endfor %}{% endfilter %}
{% with first = messages[0] if messages else none, n = messages|length %}{{ first.role if first else 'none' }}/{{ n }}{% endwith %}
{% set a, b = 'xy' %}{{ b }}{{ a }} {% set t = (1, 'two', 3.0) %}{{ t }} {{ t[1] }} {% print 'printed', 2 %}""",
    "scoping": """{% set x = 'outer' %}{% for m in messages %}{{ x }}{% set x = m.role %}={{ x }} {% endfor %}after={{ x }}
{% for m in messages %}{% if loop.first %}{% set seen = m.role %}{% endif %}[{{ seen|default('unset') }}]{% endfor %}
{% macro show() %}{{ x }}{% endmacro %}{% set x = 'changed' %}{{ show() }}
{% for m in messages %}{% for c in m.content[:3] %}{{ loop.index }}{% endfor %}:{{ loop.index }} {% endfor %}""",
    "arith": """{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 10 / 4 }} {{ 1 / 3 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ -(3) }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 'a' ~ 1 ~ none ~ true ~ 2.50 }}
{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }} {{ (1, 'a') == (1, 'a') }} {{ [1] == (1,) }} {{ 'b' in 'abc' }} {{ 'z' not in ['a', 'b'] }} {{ 'role' in messages[0] if messages else false }}
{{ messages|length + 1.5 }} {{ (messages|length) // 2 }} {{ 1_000 + 0x10 + 0o10 + 0b11 }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 7|round }} {{ 2.1|round(0, 'ceil') }} {{ -3|abs }} {{ '42'|int + '3.9'|int + 'x'|int(7) + '0x1f'|int(0, 16) }} {{ '2.5'|float * 2 }} {{ 'nan'|float }} {{ 1e400 }}""",
    "dicts": """{% set d = {'b': 1, 'a': [1, 2], 'c': {'x': none}} %}{{ d }} {{ d.b }} {{ d['a'][1] }} {{ d.c.x }} {{ d.missing }} {{ d.get('zz', 'dflt') }} {{ d.get('b') }}
{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k in d %}{{ k }}{% endfor %} {{ d.keys()|list }} {{ d.values()|list|length }} {{ d|length }}
{% for k, v in d|dictsort %}{{ k }}{% endfor %} {% for k, v in d|items %}{{ k }}{% endfor %} {{ d|dictsort(reverse=true)|first }} {{ dict(x=1, y='2') }} {{ {1: 'a', true: 'b', 2.0: 'c'} }}
{% for m in messages %}{{ m.keys()|list }} {{ m|list }} {{ m.items()|list|length }} {{ m.role is mapping }} {{ m is mapping }} {{ m is iterable }} {{ m.content is sequence }}{% endfor %}""",
    "undefined": """[{{ missing }}][{{ missing|default('d') }}][{{ missing is defined }}][{{ missing|length }}][{{ missing|list }}][{% for x in missing %}x{% else %}empty{% endfor %}][{{ missing ~ 'tail' }}][{{ messages[99] is defined }}][{{ messages[99] }}][{{ (messages[0] if messages else {}).nope }}][{{ 'x' if missing else 'y' }}][{{ missing == missing }}][{{ missing|string }}][{{ none|default('n') }}][{{ ''|default('e', true) }}][{{ missing|first }}]""",
    "generation": """{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{{ eos_token }}{% endgeneration %}{% else %}<{{ m.role }}>{{ m.content }}{% endif %}
{% endfor %}""",
    "escapes": """{{ 'tab\\there' }}|{{ "quote\\"d" }}|{{ 'it\\'s' }}|{{ 'nl\\nx' }}|{{ '\\x41\\u00e9\\U0001F600\\101' }}|{{ 'back\\\\slash' }}|{{ 'unknown\\q' }}|{{ 'adj' "acent" }}|{{ "multi
line" }}|{{ 'é'|length }}|{{ '🚀'|length }}|{{ ['é', "it's", 'both\\'"', '\\x00\\x7f\\x85\\xa0\\u200b\\u2028'] }}""",
    "safe-escape": """{{ '<b>'|safe }} {{ '<b>'|e }} {{ ('<i>'|safe) + '<&>' }} {{ '<a>' + ('"x"'|safe) }} {{ ('<x>'|e) is escaped }} {{ '<x>' is escaped }} {{ ('a'|safe)|length }} {{ ['<b>'|safe] }}""",
    "unicode-case": """{% for m in messages %}{{ m.content|upper }}|{{ m.content|lower }}|{{ m.content|title }}|{{ m.content|capitalize }}|{{ m.content.title() }}|{{ m.content.swapcase() if false else '' }}|{{ m.content|trim }}|{{ m.content.split() }}|{{ m.content is lower }}|{{ m.content is upper }}
{% endfor %}""",
    "indent": """{% for m in messages %}{{ m.content|indent }}|{{ m.content|indent(2, true) }}|{{ m.content|indent('>> ', blank=true) }}|{{ m.content|indent(first=true, width=1) }}
{% endfor %}""",
    "raise-alternation": """{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Roles must alternate: message ' ~ loop.index0 ~ ' is ' ~ m['role']) }}{% endif %}{{ m.content }}{% endfor %}""",
    "errors-runtime": """{{ messages[0].content + 1 if messages else missing.attr }}""",
    "conditional-expr": """{% for m in messages %}{{ m.role if m.role != 'system' else 'SYS' }} {{ 'A' if m.role == 'assistant' }}|{{ (m.content if m.content else 'EMPTY')|trim }} {{ m.content and 'yes' or 'no' }} {{ not m.content }} {{ m.role == 'user' and loop.last }}
{% endfor %}""",
    "tuples-lists": """{% set pairs = [('a', 1), ('b', 2)] %}{% for k, v in pairs %}{{ k }}{{ v }}{% endfor %} {{ pairs|map('first')|list }} {{ pairs|map('last')|join }} {{ [[1, 2], [3]]|map('length')|list }} {{ [1, [2, 3], (4,), {'k': 'v'}] }} {{ [] }} {{ () }} {{ (1,) }} {{ [1, 2, 3][1] }} {{ [1, 2, 3].1 }} {{ [1, 2, 3]|reverse|list }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('divisibleby', 2)|list }} {{ [1, 2, 3]|select('greaterthan', 1)|list }} {{ ['a', '', 'b']|select|join(',') }} {{ [1, 2].count(1) }} {{ ['x', 'y'].index('y') }}""",
}


EXTRA["whitespace-crlf"] = EXTRA["whitespace"].replace("\n", "\r\n") + "\r\n"
EXTRA["whitespace-cr"] = EXTRA["set-blocks"].replace("\n", "\r") + "\n\n"
EXTRA["trailing-newline"] = "{% for m in messages %}{{ m.role }}\n{% endfor %}\n"
EXTRA["unicode-indent"] = ("\u3000{% if messages %}\n\u00a0\t{% for m in messages %}\n\u2003 {{ m.role }}\n"
                           "\u3000 {% endfor %}\n{% endif %}\n\x0b{# c #}\n\x0c\x1c{% set x = 1 %}\nend")
# The shape of Qwen3's template (written here): reasoning split out of assistant turns at
# </think>, kept only after the last user turn, and the thinking switch on the generation prompt
EXTRA["thinking-switch"] = """{%- set ns = namespace(last_query=-1) %}
{%- for m in messages[::-1] %}
    {%- if ns.last_query < 0 and m.role == 'user' %}
        {%- set ns.last_query = messages|length - 1 - loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for m in messages %}
    {%- set content = m.content if m.content is string else '' %}
    {%- if m.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query and reasoning %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""
EXTRA["strftime"] = "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d')|length }}"


def extra_templates():
    return [("extra/" + k, v) for k, v in EXTRA.items()]


# ---------------------------------------------------------------- conversations

TRICKY = [
    "héllo wörld — ñ 日本語 🚀 ÀÉÎ",
    'She said "hi" and \'bye\'',
    "{{ not a tag }} {% nor this %} {# nor this #} } { %} {{",
    "line1\nline2\r\nline3\n\n",
    "  padded  \t",
    "",
    "\\ backslash \\n \\u0041",
    "tab\there\x0bvt\x0cff\x1c",
    "ΣΑΣ ΟΔΟΣ Σ. ß ﬁ İ ǅ ǈ ΐ",
    "ends with newline\n",
    "\u3000ideographic\u2003spaces\u00a0nbsp\u0085",
    "<b>html & 'stuff'</b>",
    "mixed CASE Words-with-hyphens (parens) [brackets] {braces} <angle>",
    "emoji 👍🏽 family 👨‍👩‍👧 flags 🇫🇷 zwj\u200d",
]

S, U, A = "system", "user", "assistant"


def msg(role, content):
    return {"role": role, "content": content}


def fixed_conversations():
    return [
        [msg(U, "Hello")],
        [msg(S, "You are helpful."), msg(U, "Hi")],
        [msg(U, "Hi"), msg(A, "Hello! How can I help?"), msg(U, "Tell me a joke.")],
        [msg(S, "Be brief."), msg(U, "2+2?"), msg(A, "4"), msg(U, "3+3?"), msg(A, "6")],
        [msg(U, "one"), msg(U, "two")],
        [msg(A, "I start")],
        [msg(S, "a"), msg(S, "b"), msg(U, "c")],
        [msg(S, TRICKY[0]), msg(U, TRICKY[1]), msg(A, TRICKY[2]), msg(U, TRICKY[3])],
        [msg(U, TRICKY[4]), msg(A, TRICKY[5]), msg(U, TRICKY[6])],
        [msg(U, TRICKY[7]), msg(A, TRICKY[8]), msg(U, TRICKY[9])],
        [msg(S, TRICKY[10]), msg(U, TRICKY[11]), msg(A, TRICKY[12]), msg(U, TRICKY[13])],
        [msg(U, "")],
        [msg(S, ""), msg(U, "x")],
        [],
        [msg(U, "What is 6*7?"), msg("tool", "42")],
        [msg("developer", "dev"), msg(U, "hi")],
        [msg(U, "2+2?"), msg(A, "<think>\nadd them\n</think>\n\n4"), msg(U, "and 3+3?"),
         msg(A, "<think>\n\nsix\n\n</think>\n\n6")],
    ]


def random_conversation(rng):
    pieces = TRICKY + ["Hello", "How are you?", "Fine.", "x", " ", "\n", "OK", "Sure, here it is:\n```py\nprint('hi')\n```",
                       "Ünïcödé", "{}", "[]", "%", "''", '"', "\\", "σς", "İı", "ǆ", "ﬀ"]
    n = rng.randint(1, 6)
    out = []
    if rng.random() < 0.4:
        out.append(msg(S, "".join(rng.choice(pieces) for _ in range(rng.randint(0, 3)))))
    for i in range(n):
        role = U if i % 2 == 0 else A
        if rng.random() < 0.08:
            role = rng.choice([S, U, A, "tool"])
        out.append(msg(role, "".join(rng.choice(pieces) for _ in range(rng.randint(0, 4)))))
    return out


TOKENS = [("<s>", "</s>"), ("<|begin_of_text|>", "<|eot_id|>"), (None, "<|im_end|>"), ("", "")]


# ---------------------------------------------------------------- differential fuzz of expressions

FUZZ_ATOMS = ["1", "2", "0", "-3", "7", "2.5", "0.1", "1e3", "-0.5", "'a'", "'Hello World'", "'  x y  '", "''", "'é'",
              "'ΣΑΣ'", "none", "true", "false", "[1, 2, 3]", "['b', 'a']", "[]", "(1, 'x')", "{'k': 1, 'j': 'v'}",
              "{}", "messages", "messages[0]", "messages[-1].content", "m", "m.role", "m.content", "loop.index",
              "missing", "ns.v", "range(4)", "bos_token", "eos_token", "1e400", "('nan'|float)"]
FUZZ_BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or", "**"]
FUZZ_FILTERS = ["length", "trim", "upper", "lower", "title", "capitalize", "first", "last", "list", "string", "int",
                "float", "abs", "default('d')", "join(',')", "join", "tojson", "reverse|list", "sort|list", "unique|list",
                "select|list", "reject('odd')|list", "map('string')|list", "items|list", "dictsort", "sum", "min",
                "max", "round", "round(1)", "replace('a', 'b')", "safe", "e", "indent(2)", "count", "d",
                "map(attribute='role')|list", "selectattr('role', 'eq', 'user')|list", "batch(2)|list",
                "format(1, 'x')", "format(k=2)"]
FUZZ_TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "sequence",
              "iterable", "odd", "even", "divisibleby(2)", "lower", "upper", "true", "false", "boolean", "callable",
              "in([1, 2])", "eq(1)", "sameas(none)", "escaped"]
FUZZ_METHODS = ["strip()", "upper()", "lower()", "split()", "split(' ')", "startswith('a')", "endswith('d')",
                "replace('l', 'L')", "title()", "find('o')", "count('l')", "items()|list", "keys()|list",
                "get('k')", "get('role', 0)", "index(2)", "count(1)", "rstrip('x ')", "splitlines()", "lstrip()",
                "format(1, 'a')", "format(m)", "format(k=messages)"]
FUZZ_ATOMS += ["'%s-%d'", "'%(k)s %%'", "'{} {}'", "'{0.role}|{0[content]!r}'", "'{k}{{}}'", "'%r'", "'{!s:}'"]


def fuzz_expr(rng, depth=0):
    r = rng.random()
    if depth > 3 or r < 0.3:
        return rng.choice(FUZZ_ATOMS)
    if r < 0.5:
        return f"({fuzz_expr(rng, depth + 1)} {rng.choice(FUZZ_BINOPS)} {fuzz_expr(rng, depth + 1)})"
    if r < 0.65:
        return f"{fuzz_expr(rng, depth + 1)}|{rng.choice(FUZZ_FILTERS)}"
    if r < 0.75:
        neg = rng.choice(["", "not "])
        return f"({fuzz_expr(rng, depth + 1)} is {neg}{rng.choice(FUZZ_TESTS)})"
    if r < 0.83:
        return f"{fuzz_expr(rng, depth + 1)}.{rng.choice(FUZZ_METHODS)}"
    if r < 0.9:
        return f"({fuzz_expr(rng, depth + 1)} if {fuzz_expr(rng, depth + 1)} else {fuzz_expr(rng, depth + 1)})"
    if r < 0.95:
        return f"{fuzz_expr(rng, depth + 1)}[{rng.choice(['0', '-1', '1:', ':2', '::-1', 'k', chr(39) + 'role' + chr(39)])}]"
    return f"(not {fuzz_expr(rng, depth + 1)})"


def fuzz_template(rng):
    body = " | ".join("{{ " + fuzz_expr(rng) + " }}" for _ in range(rng.randint(1, 3)))
    return ("{% set ns = namespace(v=" + rng.choice(FUZZ_ATOMS[:12]) + ") %}{% set k = 1 %}"
            "{% for m in messages %}" + body + "\n{% endfor %}")


# Structural fuzz: nested blocks with random whitespace and whitespace control, to pin down the
# lexer's trim_blocks / lstrip_blocks / {%- -%} / {%+ +%} behaviour and the statement scoping.
WS = ["", " ", "  ", "\n", "\n  ", "  \n", "\t", "x", " x ", "\n\n", "a\n  ", "\u3000", "\u00a0", "\n\t \n", "y\n"]
CONDS = ["true", "false", "m.role == 'user'", "loop is defined and loop.first", "loop is defined and not loop.last",
         "messages", "x is defined", "ns.n > 1", "y is defined"]
OUTS = ["m.role", "loop.index if loop is defined else 'L'", "'lit'", "x", "ns.n", "messages|length", "m.content|trim",
        "none", "y|default('d')", "m2|default('M')"]


def ws(rng):
    return "".join(rng.choice(WS) for _ in range(rng.randint(0, 3)))


def tag(rng, body):
    return "{%" + rng.choice(["", "", "-", "+"]) + " " + body + " " + rng.choice(["", "", "-", "+"]) + "%}"


def var(rng, body):
    return "{{" + rng.choice(["", "", "-"]) + " " + body + " " + rng.choice(["", "", "-"]) + "}}"


def block(rng, depth, in_loop):
    out = []
    for _ in range(rng.randint(1, 4)):
        out.append(ws(rng))
        r = rng.random()
        if r < 0.3:
            out.append(var(rng, rng.choice(OUTS)))
        elif r < 0.38:
            out.append("{#" + rng.choice(["", "-"]) + " c " + rng.choice(["", "-"]) + "#}")
        elif r < 0.5 and depth < 3:
            out.append(tag(rng, "if " + rng.choice(CONDS)) + block(rng, depth + 1, in_loop))
            if rng.random() < 0.4:
                out.append(tag(rng, "elif " + rng.choice(CONDS)) + block(rng, depth + 1, in_loop))
            if rng.random() < 0.4:
                out.append(tag(rng, "else") + block(rng, depth + 1, in_loop))
            out.append(tag(rng, "endif"))
        elif r < 0.62 and depth < 3:
            src = rng.choice(["messages", "range(2)", "messages|reverse", "[1, 2, 3]", "'ab'"])
            flt = rng.choice(["", "", " if loop is defined", " if m is string or m.role != 'system'"]) if src != "messages" else ""
            m = "m" if src.startswith("messages") else "m2"
            out.append(tag(rng, f"for {m} in {src}{flt}") + block(rng, depth + 1, True))
            if rng.random() < 0.3:
                out.append(tag(rng, "else") + block(rng, depth + 1, in_loop))
            out.append(tag(rng, "endfor"))
        elif r < 0.72:
            out.append(tag(rng, rng.choice(["set x = " + rng.choice(OUTS), "set ns.n = ns.n + 1", "set y = x"])))
        elif r < 0.78 and in_loop:
            out.append(tag(rng, rng.choice(["break", "continue"])))
        elif r < 0.84:
            out.append(tag(rng, "raw") + rng.choice(["{{ raw }}", " {% x %} ", "\n"]) + tag(rng, "endraw"))
        elif r < 0.9 and depth < 3:
            out.append(tag(rng, "set blk") + block(rng, depth + 1, False) + tag(rng, "endset") + var(rng, "blk"))
        else:
            out.append(rng.choice(["text", "a b", "{", "}", "%", "#"]))
    out.append(ws(rng))
    return "".join(out)


def random_float(rng):
    import math
    import struct

    while True:
        r = rng.random()
        if r < 0.3:
            x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        elif r < 0.6:
            x = rng.uniform(-1e6, 1e6)
        elif r < 0.8:
            x = rng.choice([0.1, 0.5, 1 / 3, 2 / 3, 1e15, 1e16, 1e-4, 1e-5, 123456789.123, 2.675, 0.125, 9007199254740993.0])
            x *= rng.choice([1, -1, 10, 0.1, 1e-300, 1e300])
        else:
            x = rng.randint(-10**6, 10**6) / rng.choice([1, 2, 3, 7, 10, 100, 1000])
        if math.isfinite(x):
            return x


def fuzz_numbers(rng):
    """Python float repr, arithmetic, round/int/float filters and tojson on random values,
    both constant-folded (literals) and at run time (through a namespace)."""
    a, b = random_float(rng), random_float(rng)
    i, j = rng.randint(-10**9, 10**9), rng.choice([rng.randint(-100, 100), rng.randint(-10**9, 10**9)])
    prec = rng.randint(0, 6)
    exprs = ["A", "B", "A + B", "A - B", "A * B", "A / B", "A // B", "A % B", "A|round", f"A|round({prec})",
             "A|round(1, 'floor')", "A|abs", "[A, B]|tojson", "A ~ ''", "(A|string)|float", "A < B", "A == B",
             "[A, B]|sort", "[A, B]|max", "[A, I]|sum", "I", "I + J", "I - J", "I * J", "I // J", "I % J", "I / J",
             "I ** 2", "-I", "I|string|int", "(A|string)|int", "I|float", "{'k': A}|tojson(indent=1)", "A|int",
             "'%s'|length if false else 0"]
    out = []
    for e in rng.sample(exprs, 8):
        out.append("{{ " + e.replace("A", "ns.a").replace("B", "ns.b").replace("I", "ns.i").replace("J", "ns.j") + " }}")
        out.append("{{ " + e.replace("A", repr(a)).replace("B", repr(b)).replace("I", str(i)).replace("J", str(j)) + " }}")
    return ("{% set ns = namespace(a=" + repr(a) + ", b=" + repr(b) + ", i=" + str(i) + ", j=" + str(j) + ") %}" +
            "|".join(out))


def fuzz_structure(rng):
    return ("{% set ns = namespace(n=0) %}{% set m = {'role': 'top', 'content': ' c '} %}{% set x = 'X' %}" + ws(rng) +
            block(rng, 0, False) + ws(rng))


# ---------------------------------------------------------------- running

def run_tool(tool, requests):
    payload = "".join(json.dumps(r, ensure_ascii=True) + "\n" for r in requests)
    p = subprocess.run([tool, "--lines"], input=payload.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=600)
    if p.returncode != 0:
        print(p.stderr.decode(errors="replace"), file=sys.stderr)
        raise SystemExit(f"chat_parity: chat_tool exited with {p.returncode}")
    lines = p.stdout.decode().splitlines()
    if len(lines) != len(requests):
        raise SystemExit(f"chat_parity: chat_tool answered {len(lines)} of {len(requests)} requests")
    return [json.loads(x) for x in lines]


def compare(cases, results, allow_unsupported):
    """Returns (identical, both_raise, unsupported, failures)."""
    same = both = unsupported = 0
    shown = 0
    failures = []
    for (label, req), res in zip(cases, results):
        want = py_render(req["template"], req["messages"], req["add_generation_prompt"], req.get("bos_token"),
                         req.get("eos_token"), req.get("enable_thinking"))
        if want[0] == "ok":
            if res["ok"] and res["text"] == want[1]:
                same += 1
            elif not res["ok"] and allow_unsupported and res.get("status") == "unsupported":
                unsupported += 1
                if shown < 3:
                    shown += 1
                    print(f"  unsupported: {res['error']}")
            else:
                got = res["text"] if res["ok"] else "ERROR " + res["error"]
                failures.append((label, req, f"jinja2: {want[1]!r}\n    pllm:   {got!r}"))
        else:
            if res["ok"]:
                failures.append((label, req, f"jinja2 raised {want[1]!r}\n    pllm rendered {res['text']!r}"))
            elif want[0] == "raise" and want[1] not in res["error"]:
                failures.append((label, req, f"raise_exception message {want[1]!r} not in pllm's {res['error']!r}"))
            else:
                both += 1
    return same, both, unsupported, failures


def report_failures(failures, limit=15):
    for label, req, why in failures[:limit]:
        print(f"MISMATCH {label}\n    messages={json.dumps(req['messages'], ensure_ascii=False)[:300]} "
              f"agp={req['add_generation_prompt']} bos={req.get('bos_token')!r}\n    {why}", file=sys.stderr)
    if len(failures) > limit:
        print(f"... and {len(failures) - limit} more", file=sys.stderr)


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = sys.argv[1]
    seed = int(os.environ.get("PLLM_CHAT_SEED", random.SystemRandom().randrange(1 << 31)))
    rng = random.Random(seed)
    print(f"chat_parity: seed {seed} (PLLM_CHAT_SEED={seed} replays this run)")

    real = real_templates()
    # pllm's built-in Gemma 3 template (for Gemma 3 GGUFs that carry none) is the real one, byte
    # for byte, so the renders of the real one below cover it
    builtin = subprocess.run([tool, "--builtin", "gemma3"], capture_output=True).stdout.decode("utf-8")
    gemma3 = dict(real).get("ollama/gemma3-instruct-1.jinja")
    if builtin != gemma3:
        print("chat_parity: the built-in gemma3 template differs from the shared data's gemma3-instruct-1.jinja",
              file=sys.stderr)
        return 1
    print("chat_parity: the built-in gemma3 template equals ollama/gemma3-instruct-1.jinja")
    extra = extra_templates()
    convs = fixed_conversations() + [random_conversation(rng) for _ in range(12)]

    def cases_for(templates):
        cases = []
        for name, tpl in templates:
            for ci, conv in enumerate(convs):
                for agp in (False, True):
                    for bos, eos in (TOKENS[ci % len(TOKENS)], TOKENS[(ci + 1) % len(TOKENS)]):
                        req = {"template": tpl, "messages": conv, "add_generation_prompt": agp}
                        if bos is not None:
                            req["bos_token"] = bos
                        if eos is not None:
                            req["eos_token"] = eos
                        cases.append((f"{name} conv#{ci}", req))
                        # the thinking switch (Qwen3): undefined above, then true and false
                        for et in ((True, False) if "enable_thinking" in tpl else ()):
                            cases.append((f"{name} conv#{ci} enable_thinking={et}", dict(req, enable_thinking=et)))
        return cases

    ok = True
    for title, templates in (("real templates", real), ("extra templates", extra)):
        cases = cases_for(templates)
        results = run_tool(tool, [r for _, r in cases])
        same, both, unsupported, failures = compare(cases, results, allow_unsupported=False)
        print(f"{title}: {len(templates)} templates x {len(convs)} conversations x 2 x 2: "
              f"{same}/{same + both + len(failures)} renders identical, {both} raise in both, {len(failures)} mismatches")
        if failures:
            report_failures(failures)
            ok = False

    # differential fuzz: random expressions (jinja2 features outside pllm's subset may fail as
    # "unsupported" in pllm, but never render differently)
    fuzz_cases = []
    for i in range(int(os.environ.get("PLLM_CHAT_FUZZ", "400"))):
        conv = convs[rng.randrange(len(convs))]
        tpl = fuzz_template(rng)
        fuzz_cases.append((f"fuzz#{i} {tpl!r}", {"template": tpl, "messages": conv, "add_generation_prompt": False,
                                                  "bos_token": "<s>", "eos_token": "</s>"}))
    results = run_tool(tool, [r for _, r in fuzz_cases])
    same, both, unsupported, failures = compare(fuzz_cases, results, allow_unsupported=True)
    print(f"fuzz: {len(fuzz_cases)} random templates: {same} identical, {both} raise in both, "
          f"{unsupported} unsupported in pllm, {len(failures)} mismatches")
    if failures:
        report_failures(failures)
        ok = False

    # numbers: 64-bit integer overflow is the only accepted difference ("unsupported" in pllm)
    num_cases = []
    for i in range(int(os.environ.get("PLLM_CHAT_FUZZ", "400"))):
        tpl = fuzz_numbers(rng)
        num_cases.append((f"numbers#{i} {tpl!r}", {"template": tpl, "messages": [], "add_generation_prompt": False}))
    results = run_tool(tool, [r for _, r in num_cases])
    same, both, unsupported, failures = compare(num_cases, results, allow_unsupported=True)
    print(f"number fuzz: {len(num_cases)} random templates: {same} identical, {both} raise in both, "
          f"{unsupported} unsupported in pllm, {len(failures)} mismatches")
    if failures:
        report_failures(failures)
        ok = False

    # structural fuzz: everything must match exactly (no unsupported constructs are generated)
    struct_cases = []
    for i in range(int(os.environ.get("PLLM_CHAT_FUZZ", "400"))):
        conv = convs[rng.randrange(len(convs))]
        tpl = fuzz_structure(rng)
        struct_cases.append((f"struct#{i} {tpl!r}", {"template": tpl, "messages": conv, "add_generation_prompt": True,
                                                      "bos_token": "<s>", "eos_token": "</s>"}))
    results = run_tool(tool, [r for _, r in struct_cases])
    same, both, unsupported, failures = compare(struct_cases, results, allow_unsupported=False)
    print(f"structure fuzz: {len(struct_cases)} random templates: {same} identical, {both} raise in both, "
          f"{len(failures)} mismatches")
    if failures:
        report_failures(failures)
        ok = False
    print("chat_parity: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
