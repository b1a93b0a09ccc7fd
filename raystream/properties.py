r"""Java properties files, read as Java's ``Properties.load`` reads them.

Every ``--config FILE`` of the command line that takes Kafka's ``.properties`` files
(``raystream up --config-file``, ``raystream mirror --config``, ``raystream connect
create --config``) goes through :func:`read_properties`, so one file means the same
thing everywhere and the same as it does to Kafka's tools. The parsing is the
maintained ``javaproperties`` package's, which follows Java's rules:

- a key ends at the first unescaped ``=``, ``:`` or whitespace; whitespace around the
  separator is dropped (``key value``, ``key=value`` and ``key : value`` are alike);
- a line whose first non-blank character is ``#`` or ``!`` is a comment;
- a line ending in an odd number of backslashes continues on the next line, whose
  leading whitespace is dropped;
- ``\t``, ``\n``, ``\r``, ``\f`` and ``\uXXXX`` are escapes (a surrogate pair of
  ``\u`` escapes makes one character), and a backslash before any other character
  stands for that character (``\=``, ``\:`` and ``\ `` put separators in keys);
- a line of one word is a key with an empty value, and a later key replaces an earlier.

Files are read as UTF-8, and as ISO-8859-1 when they are not valid UTF-8 (Java's
``PropertyResourceBundle`` since Java 9, JEP 226): a file Kafka's tools read gives the
same settings here, non-ASCII text written in either encoding too. Pure (file reads
only).
"""

from __future__ import annotations

import javaproperties

from raystream.errors import InvalidConfigError


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    r"""The settings of a properties file's ``text``, in file order (see the module doc).

    Example:
        >>> parse_properties("a.b = 1\nname\\ with\\:colon: x \\\n  y\n! note\n")
        {'a.b': '1', 'name with:colon': 'x y'}

    Raises:
        InvalidConfigError: a malformed ``\u`` escape (the only error Java's parser
            has), naming ``source``.
    """
    try:
        return javaproperties.loads(text)
    except javaproperties.InvalidUEscapeError as error:
        raise InvalidConfigError(f"{source}: {error}") from None


def read_properties(path: str, what: str = "properties file") -> dict[str, str]:
    r"""The settings of the properties file at ``path`` (see the module doc).

    Raises:
        InvalidConfigError: the file cannot be read or holds a malformed ``\u``
            escape; the message names ``what`` and the path.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise InvalidConfigError(f"{what} {path!r}: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_properties(text, f"{what} {path!r}")
