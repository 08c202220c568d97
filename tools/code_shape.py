"""List functions by length and positional parameters; fail over the limits.

    python tools/code_shape.py [--max-lines 60] [--max-positional 5] [--all]

Lines of code count the body without blank lines, comments and docstrings.
Positional parameters are those that can be passed by position (self and cls
excluded). Exit status 1 when a function is over a limit.
"""

from __future__ import annotations

import argparse
import ast
import io
import pathlib
import sys
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _code_lines(source: str, node: ast.AST) -> int:
    """Lines of ``node`` holding code: no blank lines, comments or docstrings."""
    doc_lines: set[int] = set()
    body = getattr(node, "body", [])
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(getattr(body[0], "value", None), ast.Constant)
    ):
        if isinstance(body[0].value.value, str):
            doc_lines = set(range(body[0].lineno, body[0].end_lineno + 1))
    lines: set[int] = set()
    text = "\n".join(source.splitlines()[node.lineno - 1 : node.end_lineno])
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            continue
        for row in range(tok.start[0], tok.end[0] + 1):
            lines.add(row + node.lineno - 1)
    return len(lines - doc_lines)


def _positional(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    return len([n for n in names if n not in ("self", "cls")])


def measure(paths: list[pathlib.Path]) -> list[tuple[str, str, int, int]]:
    """``(file:line, qualified name, code lines, positional params)`` per function."""
    rows = []
    for path in paths:
        source = path.read_text()
        tree = ast.parse(source)
        stack: list[tuple[ast.AST, str]] = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{prefix}{child.name}"
                    where = f"{path.relative_to(ROOT)}:{child.lineno}"
                    rows.append(
                        (where, name, _code_lines(source, child), _positional(child))
                    )
                    stack.append((child, name + "."))
                elif isinstance(child, ast.ClassDef):
                    stack.append((child, f"{prefix}{child.name}."))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-lines", type=int, default=60)
    parser.add_argument("--max-positional", type=int, default=5)
    parser.add_argument("--all", action="store_true", help="list every function")
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "xpml").rglob("*.py"))
    rows = measure(paths)
    over = [r for r in rows if r[2] > args.max_lines or r[3] > args.max_positional]
    shown = sorted(rows if args.all else over, key=lambda r: -r[2])
    for where, name, n_lines, n_pos in shown:
        print(f"{n_lines:4d} lines  {n_pos:2d} positional  {name}  ({where})")
    longest = max(rows, key=lambda r: r[2])
    print(
        f"{len(rows)} functions; longest {longest[1]} ({longest[2]} lines); "
        f"{len(over)} over {args.max_lines} lines or {args.max_positional} positional"
    )
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
