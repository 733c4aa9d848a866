"""Go's JSON syntax errors, word for word: a port of ``encoding/json``'s scanner.

Go checks the syntax of the whole input before it decodes anything, and the DMS reports that
check's messages (``unexpected end of JSON input``, ``invalid character 'o' in literal null
(expecting 'u')``). Python's parser words its errors differently, so when it refuses an input
the bytes are scanned again here, only to name the error as Go does.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["go_syntax_error"]

_MAX_NESTING = 10000
_SPACE = frozenset(b" \t\r\n")
_DIGITS = frozenset(b"0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = frozenset(b'bfnrt\\/"')
_LITERALS = {ord("t"): b"rue", ord("f"): b"alse", ord("n"): b"ull"}


def _quote_char(c: int) -> str:
    """Go's ``quoteChar``: how ``encoding/json`` shows the offending byte."""
    if c == ord("'"):
        return "'\\''"
    if c == ord('"'):
        return "'\"'"
    if c == ord("\\"):
        return "'\\\\'"
    ch = chr(c)
    if ch.isprintable():
        return f"'{ch}'"
    named = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r"}
    if c in named:
        return f"'{named[c]}'"
    return f"'\\x{c:02x}'" if c < 0x80 else f"'\\u{c:04x}'"


class _SyntaxScanner:
    """A port of the state machine of Go's ``encoding/json`` scanner, for its error messages."""

    def __init__(self) -> None:
        self.step: Callable[[int], None] = self.begin_value
        self.stack: list[str] = []  # "key" | "value" | "array" (Go's parseState)
        self.end_top = False
        self.error: str | None = None

    def fail(self, c: int, context: str) -> None:
        self.error = f"invalid character {_quote_char(c)} {context}"
        self.step = self.stop

    def stop(self, c: int) -> None:
        return

    def push(self, c: int, state: str) -> None:
        self.stack.append(state)
        if len(self.stack) > _MAX_NESTING:
            self.fail(c, "exceeded max depth")

    def pop(self) -> None:
        self.stack.pop()
        if self.stack:
            self.step = self.end_value
        else:
            self.step, self.end_top = self.end_of_top, True

    def begin_value_or_empty(self, c: int) -> None:
        if c in _SPACE:
            return
        if c == ord("]"):
            self.end_value(c)
        else:
            self.begin_value(c)

    def begin_value(self, c: int) -> None:
        if c in _SPACE:
            return
        if c == ord("{"):
            self.step = self.begin_string_or_empty
            self.push(c, "key")
        elif c == ord("["):
            self.step = self.begin_value_or_empty
            self.push(c, "array")
        elif c == ord('"'):
            self.step = self.in_string
        elif c == ord("-"):
            self.step = self.neg
        elif c == ord("0"):
            self.step = self.zero
        elif c in _DIGITS:
            self.step = self.digits
        elif c in _LITERALS:
            self.step = self.literal(chr(c), _LITERALS[c], 0)
        else:
            self.fail(c, "looking for beginning of value")

    def literal(self, first: str, rest: bytes, i: int) -> Callable[[int], None]:
        word = first + rest.decode()

        def step(c: int) -> None:
            if c != rest[i]:
                self.fail(c, f"in literal {word} (expecting '{chr(rest[i])}')")
            elif i + 1 == len(rest):
                self.step = self.end_value
            else:
                self.step = self.literal(first, rest, i + 1)

        return step

    def begin_string_or_empty(self, c: int) -> None:
        if c in _SPACE:
            return
        if c == ord("}"):
            self.stack[-1] = "value"
            self.end_value(c)
        else:
            self.begin_string(c)

    def begin_string(self, c: int) -> None:
        if c in _SPACE:
            return
        if c == ord('"'):
            self.step = self.in_string
        else:
            self.fail(c, "looking for beginning of object key string")

    def end_value(self, c: int) -> None:
        if not self.stack:
            self.step, self.end_top = self.end_of_top, True
            self.end_of_top(c)
            return
        if c in _SPACE:
            self.step = self.end_value
            return
        state = self.stack[-1]
        if state == "key":
            if c == ord(":"):
                self.stack[-1] = "value"
                self.step = self.begin_value
            else:
                self.fail(c, "after object key")
        elif state == "value":
            if c == ord(","):
                self.stack[-1] = "key"
                self.step = self.begin_string
            elif c == ord("}"):
                self.pop()
            else:
                self.fail(c, "after object key:value pair")
        elif c == ord(","):
            self.step = self.begin_value
        elif c == ord("]"):
            self.pop()
        else:
            self.fail(c, "after array element")

    def end_of_top(self, c: int) -> None:
        if c not in _SPACE:
            self.fail(c, "after top-level value")

    def in_string(self, c: int) -> None:
        if c == ord('"'):
            self.step = self.end_value
        elif c == ord("\\"):
            self.step = self.in_string_escape
        elif c < 0x20:
            self.fail(c, "in string literal")

    def in_string_escape(self, c: int) -> None:
        if c in _ESCAPES:
            self.step = self.in_string
        elif c == ord("u"):
            self.step = self.hex_escape(4)
        else:
            self.fail(c, "in string escape code")

    def hex_escape(self, left: int) -> Callable[[int], None]:
        def step(c: int) -> None:
            if c not in _HEX:
                self.fail(c, "in \\u hexadecimal character escape")
            else:
                self.step = self.in_string if left == 1 else self.hex_escape(left - 1)

        return step

    def neg(self, c: int) -> None:
        if c == ord("0"):
            self.step = self.zero
        elif c in _DIGITS:
            self.step = self.digits
        else:
            self.fail(c, "in numeric literal")

    def digits(self, c: int) -> None:
        if c not in _DIGITS:
            self.zero(c)

    def zero(self, c: int) -> None:
        if c == ord("."):
            self.step = self.dot
        elif c in b"eE":
            self.step = self.exponent
        else:
            self.end_value(c)

    def dot(self, c: int) -> None:
        if c in _DIGITS:
            self.step = self.fraction
        else:
            self.fail(c, "after decimal point in numeric literal")

    def fraction(self, c: int) -> None:
        if c in b"eE":
            self.step = self.exponent
        elif c not in _DIGITS:
            self.end_value(c)

    def exponent(self, c: int) -> None:
        if c in b"+-":
            self.step = self.exponent_sign
        else:
            self.exponent_sign(c)

    def exponent_sign(self, c: int) -> None:
        if c in _DIGITS:
            self.step = self.exponent_digits
        else:
            self.fail(c, "in exponent of numeric literal")

    def exponent_digits(self, c: int) -> None:
        if c not in _DIGITS:
            self.end_value(c)


def go_syntax_error(data: bytes) -> str | None:
    """The message of Go's ``checkValid`` for ``data``, or ``None`` when the syntax is valid."""
    scanner = _SyntaxScanner()
    for c in data:
        scanner.step(c)
        if scanner.error is not None:
            return scanner.error
    if not scanner.end_top:
        scanner.step(ord(" "))
        if scanner.error is None and not scanner.end_top:
            return "unexpected end of JSON input"
    return scanner.error
