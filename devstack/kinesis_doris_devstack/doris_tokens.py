"""The Doris stand-in's SQL tokenizer and the small cursor over its tokens that the statement
parsers share.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kinesis_doris_devstack.doris_schema import DorisSqlError


# --- tokenizer and a small cursor over tokens ----------------------------------------------


_TOKEN_RE = re.compile(
    r"""(?P<skip>\s+|--[^\n]*|/\*.*?\*/)
      |(?P<quoted>`(?:[^`]|``)*`)
      |(?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
      |(?P<number>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)
      |(?P<word>[A-Za-z_][A-Za-z0-9_$]*)
      |(?P<op><=|>=|<>|!=|==|[(),.=;*<>+\-/%@])""",
    re.X | re.S,
)


@dataclass(frozen=True)
class Token:
    """``kind`` is word, quoted (backticked identifier), string, number or op."""

    kind: str
    text: str
    value: str

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.value.upper() in words


def tokenize(text: str) -> list[Token]:
    """Split SQL text into tokens; strings are unescaped, backticked names unquoted."""
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN_RE.match(text, position)
        if match is None:
            raise DorisSqlError(f"Syntax error near '{text[position:position + 20]}'", 1064)
        position = match.end()
        kind = match.lastgroup or "skip"
        raw = match.group()
        if kind == "skip":
            continue
        value = raw
        if kind == "quoted":
            value = raw[1:-1].replace("``", "`")
        elif kind == "string":
            quote = raw[0]
            value = re.sub(r"\\(.)", r"\1", raw[1:-1].replace(quote * 2, quote))
        tokens.append(Token(kind, raw, value))
    return tokens


class TokenCursor:
    """Recursive-descent helper over a token list."""

    def __init__(self, tokens: Sequence[Token]) -> None:
        self._tokens = list(tokens)
        self._index = 0

    def peek(self, ahead: int = 0) -> Token | None:
        index = self._index + ahead
        return self._tokens[index] if index < len(self._tokens) else None

    def at_end(self) -> bool:
        return self.peek() is None or (self.peek_op(";") and self.peek(1) is None)

    def next(self) -> Token:
        token = self.peek()
        if token is None:
            raise DorisSqlError("Syntax error: unexpected end of statement", 1064)
        self._index += 1
        return token

    def peek_word(self, *words: str) -> bool:
        token = self.peek()
        return token is not None and token.is_word(*words)

    def peek_op(self, op: str) -> bool:
        token = self.peek()
        return token is not None and token.kind == "op" and token.value == op

    def accept_word(self, *words: str) -> bool:
        if self.peek_word(*words):
            self._index += 1
            return True
        return False

    def accept_one_of(self, *words: str) -> str | None:
        """Accept one of the keywords and return it upper-cased, or None."""
        token = self.peek()
        if token is not None and token.is_word(*words):
            self._index += 1
            return token.value.upper()
        return None

    def accept_words(self, *words: str) -> bool:
        """Accept a keyword sequence (e.g. IF NOT EXISTS) only if all of it is there."""
        if all((tok := self.peek(i)) is not None and tok.is_word(w) for i, w in enumerate(words)):
            self._index += len(words)
            return True
        return False

    def accept_op(self, op: str) -> bool:
        if self.peek_op(op):
            self._index += 1
            return True
        return False

    def expect_word(self, *words: str) -> str:
        token = self.next()
        if not token.is_word(*words):
            raise DorisSqlError(f"Syntax error: expected {'/'.join(words)} but found '{token.text}'", 1064)
        return token.value.upper()

    def expect_op(self, op: str) -> None:
        token = self.next()
        if token.kind != "op" or token.value != op:
            raise DorisSqlError(f"Syntax error: expected '{op}' but found '{token.text}'", 1064)

    def identifier(self) -> str:
        token = self.next()
        if token.kind not in ("word", "quoted"):
            raise DorisSqlError(f"Syntax error: expected a name but found '{token.text}'", 1064)
        return token.value

    def qualified_name(self) -> tuple[str | None, str]:
        first = self.identifier()
        if self.accept_op("."):
            return first, self.identifier()
        return None, first

    def name_list(self) -> list[str]:
        self.expect_op("(")
        names = [self.identifier()]
        while self.accept_op(","):
            names.append(self.identifier())
        self.expect_op(")")
        return names

    def skip_balanced(self) -> None:
        """Skip one parenthesised group (partition definitions, index options...)."""
        self.expect_op("(")
        depth = 1
        while depth:
            token = self.next()
            if token.kind == "op" and token.value in "()":
                depth += 1 if token.value == "(" else -1

    def expect_end(self) -> None:
        self.accept_op(";")
        token = self.peek()
        if token is not None:
            raise DorisSqlError(f"Syntax error near '{token.text}'", 1064)
