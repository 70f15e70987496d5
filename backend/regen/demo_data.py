"""The demo workspace's dataset catalog and its small prompt files, generated (nothing downloaded).

The catalog lists the ten code datasets the regeneration behind Specdeck drew from (88,088
samples, of which 83,288 prompts were asked again), with the sources, sizes and licenses as far as
those notes give them; a size or license they do not give is left out (shown as N/A), never guessed.

The prompt files are stand-ins of a few dozen rows per dataset, written from fixed tables so every
machine gets the same bytes.  Together they use every input shape a regeneration reads: SpecForge
records (role/content), ShareGPT turns (from/value), ``messages``, prompt-only ``prompt`` and
``text`` rows, one Parquet file, a few multi-turn conversations, a prompt that two datasets share,
a few prompts too long for the mix's limit, and three deliberately bad rows (invalid JSON, an
unknown speaker, an empty prompt) so the skipped file and its reasons show up in a demo run.

``demo_catalog_text(root)`` writes the files under ``root/datasets/`` and returns the
``[[dataset]]`` and ``[[mix]]`` tables for the demo's ``specdeck.toml``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.filemodes import create_private, make_private_dirs, open_private

DATA_DIR = "datasets"
SHARED_PROMPT = "Write a function that returns the n-th Fibonacci number iteratively."

LANGS = ("Python", "Rust", "Go", "Java", "TypeScript", "C++", "Kotlin", "Ruby", "Haskell", "C#", "Swift", "Lua")
EXT = {"Python": "py", "Rust": "rs", "Go": "go", "Java": "java", "TypeScript": "ts", "C++": "cpp",
       "Kotlin": "kt", "Ruby": "rb", "Haskell": "hs", "C#": "cs", "Swift": "swift", "Lua": "lua"}
TASKS = (
    "parse an ISO-8601 date and return the weekday",
    "merge two sorted lists into one sorted list",
    "count word frequencies in a text and return the ten most common",
    "check whether a string of brackets is balanced",
    "compute the Levenshtein distance between two strings",
    "flatten a nested list of integers",
    "find the longest increasing subsequence of an array",
    "rotate an n x n matrix by 90 degrees in place",
    "validate an IPv4 address",
    "implement a least-recently-used cache with a fixed capacity",
    "serialize a binary tree to a string and back",
    "return all permutations of a list without duplicates",
    "compute the median of a stream of numbers",
    "find the shortest path in a grid with obstacles",
    "group anagrams from a list of words",
    "convert a Roman numeral to an integer",
    "detect a cycle in a directed graph",
    "split a CSV line that may contain quoted commas",
    "rate-limit calls with a token bucket",
    "compute the power set of a small set",
)
SNIPPETS = {
    "Python": "def chunks(xs, n):\n    for i in range(0, len(xs), n):\n        yield xs[i:i + n]\n",
    "Rust": "fn chunks<T: Clone>(xs: &[T], n: usize) -> Vec<Vec<T>> {\n    xs.chunks(n).map(|c| c.to_vec()).collect()\n}\n",
    "Go": "func Chunks(xs []int, n int) [][]int {\n\tvar out [][]int\n\tfor n < len(xs) {\n\t\txs, out = xs[n:], append(out, xs[:n])\n\t}\n\treturn append(out, xs)\n}\n",
    "Java": "static <T> List<List<T>> chunks(List<T> xs, int n) {\n    List<List<T>> out = new ArrayList<>();\n    for (int i = 0; i < xs.size(); i += n) out.add(xs.subList(i, Math.min(i + n, xs.size())));\n    return out;\n}\n",
    "TypeScript": "export const chunks = <T>(xs: T[], n: number): T[][] =>\n  Array.from({ length: Math.ceil(xs.length / n) }, (_, i) => xs.slice(i * n, i * n + n));\n",
}
NATURAL = (  # HumanEval-XL asks the same problems in many natural languages
    ("English", "Return the sum of the even numbers in the list."),
    ("Deutsch", "Gib die Summe der geraden Zahlen in der Liste zurück."),
    ("Français", "Renvoie la somme des nombres pairs de la liste."),
    ("Español", "Devuelve la suma de los números pares de la lista."),
    ("中文", "返回列表中所有偶数的和。"),
    ("日本語", "リスト内の偶数の合計を返してください。"),
    ("Русский", "Верните сумму чётных чисел в списке."),
    ("Português", "Retorne a soma dos números pares da lista."),
)


@dataclass(frozen=True)
class DemoDataset:
    name: str
    source: str
    size: int | None
    license: str | None
    domain: str
    file: str
    notes: str
    rows: Callable[[], list[Any]]  # records (or raw lines as str) in file order


# -- the rows of each file -------------------------------------------------------------------------


def _pick(seq: tuple, i: int, step: int = 1) -> Any:
    return seq[(i * step) % len(seq)]


def _stack_v2() -> list[Any]:
    out: list[Any] = []
    for i in range(40):
        lang = _pick(LANGS, i, 5)
        snippet = SNIPPETS.get(lang, SNIPPETS["Python"])
        out.append({"id": f"stack-v2-{i:04d}", "path": f"src/util_{i}.{EXT[lang]}", "language": lang,
                    "text": f"Explain what this {lang} file does, then suggest one improvement.\n\n"
                            f"```{EXT[lang]}\n// src/util_{i}.{EXT[lang]}\n{snippet}```"})
    out.append({"text": SHARED_PROMPT})  # the same prompt as one in MultiPL-E: asked once per mix
    return out


def _codesearchnet() -> list[dict[str, Any]]:  # written as Parquet
    langs = ("Go", "Java", "JavaScript", "Python", "Ruby", "PHP")
    out = []
    for i in range(40):
        lang, task = _pick(langs, i), _pick(TASKS, i, 3)
        out.append({"id": f"csn-{lang.lower()}-{i:04d}", "language": lang, "conversations": [
            {"role": "user", "content": f"Write a {lang} function with a docstring that does this: {task}."},
            {"role": "assistant", "content": f"Here is a {lang} function that will {task}. (original answer)"},
        ]})
    return out


def _mceval() -> list[dict[str, Any]]:
    out = []
    for i in range(30):
        lang, task = _pick(LANGS, i, 7), _pick(TASKS, i, 7)
        out.append({"id": f"mceval-{i:04d}", "conversations": [
            {"role": "system", "content": f"You are an expert {lang} programmer. Answer with code and a short explanation."},
            {"role": "user", "content": f"In {lang}, {task}. Include two unit tests."},
            {"role": "assistant", "content": f"(original {lang} answer)"},
        ]})
    return out


def _multipl_e() -> list[Any]:
    out: list[Any] = []
    for i in range(29):
        lang, task = _pick(LANGS, i, 5), _pick(TASKS, i, 11)
        out.append({"name": f"HumanEval_{i}_{EXT[lang]}", "language": EXT[lang],
                    "prompt": f"Complete this {lang} function so that it will {task}.\n"
                              f"Keep the signature; the hidden tests call it directly."})
    out.append({"name": "HumanEval_empty", "language": "py", "prompt": "   "})  # bad: empty prompt
    out.append({"name": "HumanEval_fib", "language": "py", "prompt": SHARED_PROMPT})
    return out


def _codeforces() -> list[dict[str, Any]]:
    out = []
    for i in range(30):
        n = 100 + 7 * i
        turns = [
            {"from": "human", "value": f"Codeforces {1800 + i}{'ABCD'[i % 4]}: given n = {n} integers, "
                                        f"{_pick(TASKS, i, 13)}. Time limit 1 s, n up to 2e5. Solve it in C++."},
            {"from": "gpt", "value": "(original solution)"},
        ]
        if i % 3 == 0:  # a follow-up turn: first_turn_only drops it in the demo mix
            turns += [{"from": "human", "value": "Now explain the time complexity."},
                      {"from": "gpt", "value": "(original explanation)"}]
        out.append({"id": f"cf-{1800 + i}", "conversations": turns})
    return out


def _verifiable() -> list[dict[str, Any]]:
    out = []
    for i in range(30):
        task = _pick(TASKS, i, 9)
        out.append({"id": f"vcp-{i:05d}", "source": "synthetic",
                    "prompt": f"Solve the following problem in Python and print the answer.\n\nProblem {i}: {task}. "
                              f"Read the input from standard input.",
                    "verification_info": {"test_cases": [{"input": f"{i}\n", "output": f"{i * 2}\n"}]}})
    return out


def _leetcode() -> list[Any]:
    out: list[Any] = []
    for i in range(28):
        lang = _pick(LANGS, i, 3)
        turns = [{"from": "human", "value": f"LeetCode {i + 1}: {_pick(TASKS, i, 17)}. Give a {lang} solution."},
                 {"from": "gpt", "value": f"(original {lang} solution)"}]
        if i % 2:
            turns += [{"from": "human", "value": "Can you do it with O(1) extra space?"},
                      {"from": "gpt", "value": "(original follow-up)"}]
        out.append({"id": f"lc-{i + 1}", "conversations": turns})
    out.insert(10, '{"id": "lc-broken", "conversations": [{"from": "human", "value": "Two Sum')  # bad: cut-off JSON
    out.insert(20, {"id": "lc-robot", "conversations": [{"from": "robot", "value": "beep"}]})  # bad: unknown speaker
    return out


def _humaneval_x() -> list[dict[str, Any]]:
    langs = ("Python", "Java", "JavaScript", "Go", "Rust")  # HumanEval-X's five languages
    out = []
    for lang in langs:
        for k in range(5):
            out.append({"id": f"{lang}/{k}", "conversations": [
                {"role": "user", "content": f"Complete the {lang} function `task_{k}` so that it will "
                                            f"{TASKS[k * 4]}. Return only the code."}]})
    return out


def _humaneval_xl() -> list[dict[str, Any]]:
    out = []
    for i in range(24):
        natural, ask = _pick(NATURAL, i)
        lang = _pick(("Python", "Java", "Go"), i // 8)
        out.append({"id": f"xl-{lang.lower()}-{natural}-{i}", "messages": [
            {"role": "user", "content": f"[{natural}] {lang}: {ask}"}]})
    return out


def _swe_polybench() -> list[dict[str, Any]]:
    out = []
    for i in range(20):
        lang = _pick(("Java", "JavaScript", "TypeScript", "Python"), i)
        context = SNIPPETS.get(lang, SNIPPETS["Java"]) * (3 if i % 5 else 40)  # every fifth is long
        out.append({"id": f"swe-poly-{i:03d}", "repo": f"example/{lang.lower()}-service", "conversations": [
            {"role": "system", "content": "You are fixing an issue in a repository. Reply with a unified diff."},
            {"role": "user", "content": f"Issue #{300 + i}: chunking drops the last element when the length is "
                                        f"a multiple of n.\n\nRelevant file ({lang}):\n{context}"},
        ]})
    return out


def _code(name: str, source: str, size: int | None, license_: str | None, rows: Callable[[], list[Any]],
          notes: str, ext: str = "jsonl") -> DemoDataset:
    return DemoDataset(name, source, size, license_, "code", f"{DATA_DIR}/{name}.{ext}", notes, rows)


DATASETS: tuple[DemoDataset, ...] = (
    _code("the-stack-v2", "bigcode/the-stack-v2", None, "gated: Software Heritage terms of use (agreement required)",
          _stack_v2, "Code pretraining corpus, about 4 trillion tokens in 600+ languages; no row count given"),
    _code("codesearchnet", "sentence-transformers/codesearchnet", None, None, _codesearchnet,
          "1M-10M rows of Go, Java, JavaScript, Python, Ruby and PHP; Parquet", ext="parquet"),
    _code("mceval-instruct", "mceval/mceval-instruct", None, None, _mceval,
          "Instruction tuning in 40 languages from the McEval benchmark; openly available"),
    _code("multipl-e", "multi-pl-e/multi-pl-e", None, None, _multipl_e,
          "HumanEval in 18+ programming languages"),
    _code("codeforces", "open-r1/codeforces", None, None, _codeforces,
          "Competitive programming problems and solutions"),
    _code("verifiable-coding-problems", "PrimeIntellect/verifiable-coding-problems", 144_000, None, _verifiable,
          "144K problems with test cases (size as given, rounded)"),
    _code("leetcode-solutions", "kaysss/leetcode-problem-solutions", None, None, _leetcode,
          "LeetCode problems with solutions in several languages"),
    _code("humaneval-x", "zai-org/humaneval-x", 820, None, _humaneval_x,
          "820 samples in Python, Java, JavaScript, Go and Rust"),
    _code("humaneval-xl", "humaneval-xl/humaneval-xl", None, None, _humaneval_xl,
          "HumanEval across many natural and programming languages"),
    _code("swe-polybench", "swe-polybench/swe-polybench", None, None, _swe_polybench,
          "Real-world software engineering tasks in several languages"),
)
FIRST_TURN_ONLY = {"codeforces", "leetcode-solutions"}
MAX_PROMPT_CHARS = {"swe-polybench": 4000}
SMOKE = {"humaneval-x": 5, "mceval-instruct": 5, "codesearchnet": 5}


# -- writing -----------------------------------------------------------------------------------------


def write_demo_datasets(root: Path) -> list[Path]:
    """Write every demo prompt file under ``root`` (same bytes on every machine); their paths."""
    paths = []
    for ds in DATASETS:
        path = Path(root) / ds.file
        make_private_dirs(path.parent)
        tmp = path.with_name(f".{path.name}.tmp")
        if path.suffix == ".parquet":
            create_private(tmp)  # pyarrow truncates it and keeps the mode
            _write_parquet(tmp, ds.rows())
        else:
            with open_private(tmp, "w", encoding="utf-8", newline="\n") as f:
                for rec in ds.rows():
                    f.write((rec if isinstance(rec, str) else json.dumps(rec, ensure_ascii=False)) + "\n")
        os.replace(tmp, path)
        paths.append(path)
    return paths


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    turn = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema([("id", pa.string()), ("language", pa.string()), ("conversations", pa.list_(turn))])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=16)


def demo_catalog_text(root: Path) -> str:
    """Write the demo prompt files under ``root`` and return the catalog and mix tables for them."""
    write_demo_datasets(root)
    s = json.dumps  # a JSON string is a valid TOML basic string
    parts = ["""
# Regeneration inputs. The catalog lists the ten code datasets of the original run (88,088
# samples, 83,288 of them prompts asked again); the files are small generated stand-ins.
# A size or license the sources did not give is left out and shows as N/A.
"""]
    for ds in DATASETS:
        lines = [f"name = {s(ds.name)}", f"source = {s(ds.source)}"]
        lines += [f"size = {ds.size}"] if ds.size is not None else []
        lines += [f"license = {s(ds.license)}"] if ds.license is not None else []
        lines += [f"domain = {s(ds.domain)}", f"file = {s(ds.file)}", f"notes = {s(ds.notes, ensure_ascii=False)}"]
        parts.append("[[dataset]]\n" + "\n".join(lines) + "\n")
    parts.append("# code-mix: every dataset, multi-turn ones asked for their first turn only,\n"
                 "# over-long repository prompts skipped.  smoke: 15 rows for a quick run.")
    for ds in DATASETS:
        lines = ['name = "code-mix"', f"dataset = {s(ds.name)}"]
        lines += ["first_turn_only = true"] if ds.name in FIRST_TURN_ONLY else []
        lines += [f"max_prompt_chars = {MAX_PROMPT_CHARS[ds.name]}"] if ds.name in MAX_PROMPT_CHARS else []
        parts.append("[[mix]]\n" + "\n".join(lines) + "\n")
    for name, samples in SMOKE.items():
        parts.append(f'[[mix]]\nname = "smoke"\ndataset = {s(name)}\nsamples = {samples}\n')
    return "\n".join(parts)
