"""The one helper that puts a count and its noun in the right number."""
import doctest

import twisted_stalk.wording as wording
from twisted_stalk.wording import counted


def test_singular_only_for_one():
    assert counted(1, "connection") == "1 connection"
    assert counted(0, "connection") == "0 connections"
    assert counted(2, "connection") == "2 connections"
    assert counted(-1, "job") == "-1 jobs"


def test_irregular_plural():
    assert counted(5, "index", "indexes") == "5 indexes"
    assert counted(1, "index", "indexes") == "1 index"


def test_doctests():
    assert doctest.testmod(wording).failed == 0
