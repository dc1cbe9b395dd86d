"""Every relative link in README.md, CHANGELOG.md and docs/*.md resolves.

A link to a file or folder must name one that exists in the repository; a
link with an anchor into a Markdown file (or a bare `#anchor`) must name one
of that file's headings, as GitHub spells heading anchors. Links inside code
(fenced blocks, inline code) and links with a scheme (https:, mailto:) are not
checked. Also keeps README.md a page for users: at most 300 lines (issue 56).
"""

import glob
import os
import re
from typing import Dict, Iterator, List

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 300

_FENCE = re.compile(r'^\s*(```|~~~)')
_CODE_SPAN = re.compile(r'`[^`\n]*`')
# [text](target) and ![alt](target), with an optional "title".
_LINK = re.compile(r'!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+"[^"]*")?\s*\)')
_HEADING = re.compile(r'^#{1,6}\s+(.+?)\s*#*\s*$')
_SCHEME = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*:')


def documents() -> List[str]:
  """The checked documents, relative to the repository root."""
  docs = sorted(os.path.relpath(p, ROOT)
                for p in glob.glob(os.path.join(ROOT, 'docs', '*.md')))
  return ['README.md', 'CHANGELOG.md'] + docs


def _prose_lines(text: str) -> Iterator[str]:
  """The lines of `text` outside fenced code blocks."""
  in_fence = False
  for line in text.splitlines():
    if _FENCE.match(line):
      in_fence = not in_fence
    elif not in_fence:
      yield line


def slug(heading: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation dropped, '-' for spaces."""
  text = heading.strip().lower()
  text = re.sub(r'[^\w\- ]', '', text)
  return text.replace(' ', '-')


def anchors(text: str) -> List[str]:
  """Anchors of the headings in `text`; a repeated one gets -1, -2, ..."""
  seen: Dict[str, int] = {}
  out = []
  for line in _prose_lines(text):
    match = _HEADING.match(line)
    if not match:
      continue
    base = slug(match.group(1))
    count = seen.get(base, 0)
    seen[base] = count + 1
    out.append(base if count == 0 else f'{base}-{count}')
  return out


def links(text: str) -> List[str]:
  """Link targets in the prose of `text` (not in code)."""
  prose = '\n'.join(_prose_lines(text))
  return _LINK.findall(_CODE_SPAN.sub('', prose))


def broken_links(path: str) -> List[str]:
  """'target: why' for each relative link of the Markdown file at `path`."""
  with open(path, encoding='utf-8') as f:
    text = f.read()
  broken = []
  for target in links(text):
    if _SCHEME.match(target):
      continue
    file_part, _, anchor = target.partition('#')
    if file_part:
      resolved = os.path.normpath(
          os.path.join(os.path.dirname(path), file_part))
      if not os.path.exists(resolved):
        broken.append(f'{target}: no such file')
        continue
    else:
      resolved = path
    if anchor and resolved.endswith('.md'):
      with open(resolved, encoding='utf-8') as f:
        if anchor not in anchors(f.read()):
          broken.append(f'{target}: no heading with this anchor')
  return broken


@pytest.mark.parametrize('doc', documents())
def test_every_relative_link_resolves(doc):
  assert broken_links(os.path.join(ROOT, doc)) == [], doc


def test_readme_stays_short():
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    lines = len(f.read().splitlines())
  assert lines <= README_MAX_LINES, (
      f'README.md has {lines} lines: it is for users; history goes to '
      'CHANGELOG.md, measurements to docs/benchmarks.md')


def test_the_checker_finds_what_is_broken(tmp_path):
  (tmp_path / 'sub').mkdir()
  (tmp_path / 'sub' / 'other.md').write_text('# Other page\n\n## Step 2: `run` it\n')
  page = tmp_path / 'page.md'
  page.write_text(
      '# Title\n\n'
      'Good: [other](sub/other.md), [a step](sub/other.md#step-2-run-it), '
      '[here](#title), ![img](sub), [web](https://example.com/x.md).\n'
      'Bad: [gone](missing.md), [anchor](sub/other.md#step-3), [local](#nope).\n'
      'Code is not checked: `[x](nowhere.md)`\n'
      '```\n[y](nowhere_either.md)\n```\n')
  assert broken_links(str(page)) == [
      'missing.md: no such file',
      'sub/other.md#step-3: no heading with this anchor',
      '#nope: no heading with this anchor',
  ]


def test_anchors_follow_github():
  assert anchors("# Does it work?\n## Measured on this project's CPU\n"
                 '## The `bench/search_step.py` step\n# Does it work?\n') == [
                     'does-it-work', 'measured-on-this-projects-cpu',
                     'the-benchsearch_steppy-step', 'does-it-work-1']
