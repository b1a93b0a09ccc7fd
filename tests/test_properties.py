"""Java properties files (the one reader of every ``--config FILE``): pure, no Ray."""

from __future__ import annotations

import pytest

from raystream.errors import InvalidConfigError
from raystream.properties import parse_properties, read_properties

JAVA_FILE = (
    "# a comment line\n"
    "   ! another comment, indented\n"
    "plain=value\n"
    "spaced   =   value with trailing spaces   \n"
    "colon:value\n"
    "whitespace separated value\n"
    "tab\tseparated\n"
    "escaped\\=key\\:with\\ separators = x\n"
    "escapes = tab\\there\\nnewline\\rreturn\\fformfeed\n"
    "unicode = caf\\u00e9 \\u20ac \\uD83D\\uDE00\n"
    "other\\ escapes = \\q\\#\\!\\\\\n"
    "continued = first, \\\n"
    "            second, \\\n"
    "\t\t    third\n"
    "even\\\\ = two backslashes end no line\\\\\n"
    "next = line\n"
    "lonely\n"
    "empty =\n"
    "\\#not-a-comment = hash key\n"
    "dup = first\n"
    "dup = second\n"
    "  leading.whitespace = kept key\n"
    "url = http://h:1/x?a=b\n"
    "last = ends in a continuation \\"
)
"""Every rule of ``java.util.Properties.load`` at least once."""

JAVA_SETTINGS = {
    # the separator is the first unescaped '=', ':' or whitespace; blanks around it go
    "plain": "value",
    "spaced": "value with trailing spaces   ",  # trailing blanks of a value are kept
    "colon": "value",
    "whitespace": "separated value",
    "tab": "separated",
    # a backslash before a separator puts it in the key
    "escaped=key:with separators": "x",
    "escapes": "tab\there\nnewline\rreturn\x0cformfeed",
    # \uXXXX, and a surrogate pair of them makes one character
    "unicode": "caf\u00e9 \u20ac \U0001f600",
    # a backslash before any other character is that character
    "other escapes": "q#!\\",
    # a line ending in an odd number of backslashes continues, the next one's leading
    # blanks dropped
    "continued": "first, second, third",
    # an even number is escaped backslashes: the line ends there
    "even\\": "two backslashes end no line\\",
    "next": "line",
    "lonely": "",  # a key alone has an empty value
    "empty": "",
    "#not-a-comment": "hash key",  # only an unescaped # or ! first makes a comment
    "dup": "second",  # the later of two equal keys wins
    "leading.whitespace": "kept key",
    "url": "http://h:1/x?a=b",  # separators after the first are the value's
    "last": "ends in a continuation ",  # a continuation at the end of the file ends it
}
"""What Java's ``Properties.load`` gives for :data:`JAVA_FILE`, written from Java's
rules (and checked once against Java 17's own ``Properties.load``)."""


def test_a_file_parses_as_javas_properties_load_does() -> None:
    assert parse_properties(JAVA_FILE) == JAVA_SETTINGS


def test_a_file_is_read_as_utf_8_and_as_latin_1_when_it_is_not_utf_8(tmp_path) -> None:
    utf8 = tmp_path / "utf8.properties"
    utf8.write_bytes("name = caf\u00e9 \u20ac\n".encode())
    assert read_properties(str(utf8)) == {"name": "caf\u00e9 \u20ac"}
    latin1 = tmp_path / "latin1.properties"  # what Java's Properties.load(InputStream) reads
    latin1.write_bytes("name = caf\u00e9\n".encode("iso-8859-1"))
    assert read_properties(str(latin1)) == {"name": "caf\u00e9"}
    java = tmp_path / "java.properties"
    java.write_text(JAVA_FILE)
    assert read_properties(str(java)) == JAVA_SETTINGS


def test_a_malformed_unicode_escape_or_a_missing_file_is_refused_naming_the_file(
    tmp_path,
) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("ok = 1\nbroken = \\u12G4\n")
    with pytest.raises(InvalidConfigError, match=r"--config '.*bad\.properties'.*\\u12G4"):
        read_properties(str(bad), "--config")
    with pytest.raises(InvalidConfigError, match=r"server.properties '.*nowhere.*': No such"):
        read_properties(str(tmp_path / "nowhere.properties"), "server.properties")
