#!/usr/bin/env python3
"""Checks the book (docs/) and the Markdown files beside it, for `scripts/docs.sh check`.

    python3 scripts/check_docs.py links                 # links and includes in the Markdown
    python3 scripts/check_docs.py html BOOK_DIR         # links and anchors in the built book
    python3 scripts/check_docs.py jobs WEIR             # every job-file code block validates

`links` reads docs/src/**/*.md, docs/benchmarks/**/*.md, README.md, BENCHMARKS.md and
DESIGN.md. A relative link must name a file that exists, and its `#fragment` a heading of that
file (as mdBook and GitHub make heading ids); an `{{#include FILE:ANCHOR}}` must name a file
that exists and an anchor it marks; every page of docs/src must be listed in SUMMARY.md, which
must list only pages that exist. Links to the web are not followed.

`html` reads the book mdBook built: every `href` to a page of the book must name a file that
exists, and its `#fragment` an `id` on that page. It is the check of what a reader clicks.

`jobs` writes each code block marked as a job file (a fence whose info string is `yaml job`)
to a file of its own and runs `WEIR validate` on it from the repository's root, so the job's
relative paths (`jobs/examples/clicks.jsonl`) resolve as they do for a reader there.

Each problem is printed as `file:line: what`; the exit status is 1 if there is any.
"""

import html.parser
import os
import re
import subprocess
import sys
import tempfile
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "docs", "src")
JOB_MARKER = "yaml job"

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
INCLUDE = re.compile(r"(?<!\\)\{\{#include\s+([^}\s]+)\s*\}\}")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
ANCHOR = re.compile(r"ANCHOR:\s*([\w-]+)")


def rel(path):
    return os.path.relpath(path, ROOT)


def markdown_files():
    files = [os.path.join(ROOT, f) for f in ("README.md", "BENCHMARKS.md", "DESIGN.md")]
    for top in (SRC, os.path.join(ROOT, "docs", "benchmarks")):
        for dirpath, _, names in os.walk(top):
            files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.exists(f)]


def prose_lines(text, blank_code=True):
    """(line number, line) of the lines outside fenced code blocks, inline code blanked out
    (unless `blank_code` is false)."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(2)[0] * len(m.group(2))
            continue
        if fence is not None:
            if m and m.group(2).startswith(fence) and not m.group(3).strip():
                fence = None
            continue
        if blank_code:
            line = re.sub(r"`+[^`]*`+", lambda c: " " * len(c.group(0)), line)
        yield number, line


def code_blocks(text):
    """(line number, info string, body) of every fenced code block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        marker, info, start = m.group(2), m.group(3).strip(), i + 1
        body = []
        i += 1
        while i < len(lines):
            end = FENCE.match(lines[i])
            if end and end.group(2).startswith(marker) and not end.group(3).strip():
                break
            body.append(lines[i])
            i += 1
        yield start, info, "\n".join(body) + "\n"
        i += 1


def heading_id(text):
    """The id mdBook (and, for these headings, GitHub) gives a heading."""
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    out = []
    for ch in text:
        if ch.isalnum() or ch in "_-":
            out.append(ch.lower())
        elif ch.isspace():
            out.append("-")
        elif unicodedata.category(ch).startswith("L"):
            out.append(ch.lower())
    return "".join(out)


def expand(path, text, seen=()):
    """The text mdBook renders for `path`: its includes expanded."""

    def one(m):
        target, part = split_include(path, m.group(1))
        if target in seen or not os.path.isfile(target):
            return ""
        body = read(target)
        body = select(body, part)
        return expand(target, body, seen + (target,))

    return INCLUDE.sub(one, text)


def split_include(path, spec):
    name, _, part = spec.partition(":")
    return os.path.normpath(os.path.join(os.path.dirname(path), name)), part


def select(body, part):
    """The part of an included file mdBook takes: all, lines `A:B`, or an anchor's lines."""
    if not part:
        return body
    lines = body.split("\n")
    pieces = part.split(":")
    if all(p == "" or p.isdigit() for p in pieces):
        start = int(pieces[0]) - 1 if pieces[0] else 0
        end = int(pieces[1]) if len(pieces) > 1 and pieces[1] else len(lines)
        return "\n".join(lines[start:end])
    out, inside = [], False
    for line in lines:
        if re.search(r"ANCHOR_END:\s*" + re.escape(part) + r"\b", line):
            inside = False
        elif re.search(r"ANCHOR:\s*" + re.escape(part) + r"\b", line):
            inside = True
        elif inside and "ANCHOR" not in line:
            out.append(line)
    return "\n".join(out)


_cache = {}


def read(path):
    if path not in _cache:
        with open(path, encoding="utf-8") as f:
            _cache[path] = f.read()
    return _cache[path]


def headings(path):
    ids, counts = set(), {}
    for _, line in prose_lines(expand(path, read(path)), blank_code=False):
        m = HEADING.match(line)
        if m:
            base = heading_id(m.group(2))
            n = counts.get(base, 0)
            counts[base] = n + 1
            ids.add(base if n == 0 else f"{base}-{n}")
    return ids


def check_links():
    problems = []
    for path in markdown_files():
        text = read(path)
        for number, line in prose_lines(text):
            for m in INCLUDE.finditer(line):
                target, part = split_include(path, m.group(1))
                if not os.path.isfile(target):
                    problems.append(f"{rel(path)}:{number}: includes {m.group(1)}, which does not exist")
                elif part and not part.replace(":", "").isdigit() and part not in ANCHOR.findall(read(target)):
                    problems.append(f"{rel(path)}:{number}: includes anchor `{part}`, which {rel(target)} does not mark")
            for m in list(LINK.finditer(line)) + list(IMAGE.finditer(line)):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue
                file, _, fragment = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
                if not os.path.exists(dest):
                    problems.append(f"{rel(path)}:{number}: links to {target}, but {rel(dest)} does not exist")
                    continue
                if fragment and dest.endswith(".md") and fragment not in headings(dest):
                    problems.append(f"{rel(path)}:{number}: links to {target}, but {rel(dest)} has no heading `#{fragment}`")
                if path.startswith(SRC + os.sep) and not os.path.realpath(dest).startswith(SRC + os.sep) and os.path.isfile(dest):
                    problems.append(f"{rel(path)}:{number}: links to {target}, outside docs/src: the built book would not have it")
    problems += check_summary()
    return problems


def check_summary():
    summary = os.path.join(SRC, "SUMMARY.md")
    listed = set()
    problems = []
    for number, line in prose_lines(read(summary)):
        for m in LINK.finditer(line):
            if m.group(1):
                dest = os.path.normpath(os.path.join(SRC, m.group(1)))
                listed.add(dest)
                if not os.path.isfile(dest):
                    problems.append(f"{rel(summary)}:{number}: lists {m.group(1)}, which does not exist")
    for dirpath, _, names in os.walk(SRC):
        for n in names:
            page = os.path.join(dirpath, n)
            if n.endswith(".md") and page != summary and page not in listed:
                problems.append(f"{rel(page)}:1: not listed in docs/src/SUMMARY.md, so the book leaves it out")
    return problems


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.hrefs = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append((self.getpos()[0], attrs["href"]))


def check_html(book):
    pages = {}
    for dirpath, _, names in os.walk(book):
        for n in names:
            if n.endswith(".html"):
                path = os.path.join(dirpath, n)
                page = Page()
                with open(path, encoding="utf-8") as f:
                    page.feed(f.read())
                pages[os.path.normpath(path)] = page
    problems = []
    for path, page in sorted(pages.items()):
        if os.path.basename(path) in ("print.html", "toc.html", "404.html"):
            continue
        for number, href in page.hrefs:
            if re.match(r"^[a-z][a-z0-9+.-]*:", href) or href.startswith("//"):
                continue
            file, _, fragment = href.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if os.path.isdir(dest):
                dest = os.path.join(dest, "index.html")
            where = os.path.relpath(path, book)
            if not os.path.exists(dest):
                problems.append(f"book/{where}:{number}: links to {href}, which the book does not have")
            elif fragment and dest in pages and fragment not in pages[dest].ids:
                problems.append(f"book/{where}:{number}: links to {href}, but that page has no id `{fragment}`")
    if not pages:
        problems.append(f"{book}: no HTML pages (did mdBook build?)")
    return problems


def check_jobs(weir):
    problems, count = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in markdown_files():
            for number, info, body in code_blocks(read(path)):
                if info != JOB_MARKER:
                    continue
                count += 1
                name = re.sub(r"[^\w]+", "-", rel(path)) + f"-{number}.yaml"
                job = os.path.join(tmp, name)
                with open(job, "w", encoding="utf-8") as f:
                    f.write(body)
                out = subprocess.run([weir, "validate", job], cwd=ROOT, capture_output=True, text=True)
                if out.returncode != 0:
                    said = (out.stdout + out.stderr).strip().replace(job, "<block>")
                    problems.append(f"{rel(path)}:{number}: the job file does not validate:\n{said}")
    if count == 0:
        problems.append(f"no code block marked ```{JOB_MARKER}: the check would prove nothing")
    print(f"docs: {count} job files validated", file=sys.stderr)
    return problems


def main():
    args = sys.argv[1:]
    if args[:1] == ["links"]:
        problems = check_links()
    elif args[:1] == ["html"] and len(args) == 2:
        problems = check_html(args[1])
    elif args[:1] == ["jobs"] and len(args) == 2:
        problems = check_jobs(args[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
