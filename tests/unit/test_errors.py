"""errors.py: one root, each error also its builtin, and the path and offset in the message."""
from __future__ import annotations

import pytest

from rmqstore import errors as E

BUILTIN = {
    E.ConfigError: ValueError, E.CorruptRecordError: ValueError, E.UnitMismatchError: ValueError,
    E.StoreIOError: OSError, E.OffsetError: LookupError, E.StoreLockedError: RuntimeError,
    E.ReadOnlyStoreError: PermissionError, E.StoreNotFoundError: FileNotFoundError,
    E.StoreClosedError: RuntimeError, E.MessageIdError: ValueError, E.OutputExistsError: FileExistsError,
    E.HAProtocolError: ValueError,
}


def test_every_error_class_is_listed_here():
    defined = {v for v in vars(E).values() if isinstance(v, type) and issubclass(v, BaseException)}
    assert defined - {E.RmqStoreError} == set(BUILTIN)


@pytest.mark.parametrize("cls", sorted(BUILTIN, key=lambda c: c.__name__))
def test_each_error_is_caught_as_the_root_and_as_its_builtin(cls):
    with pytest.raises(E.RmqStoreError):
        raise cls("x")
    with pytest.raises(BUILTIN[cls]):
        raise cls("x")


def test_a_unit_mismatch_is_a_corrupt_record():
    assert issubclass(E.UnitMismatchError, E.CorruptRecordError)


def test_path_and_offset_are_attributes_and_in_the_message():
    e = E.CorruptRecordError("bad magic", path="/s/commitlog/00000000000000000000", offset=4096)
    assert (e.path, e.offset) == ("/s/commitlog/00000000000000000000", 4096)
    assert str(e) == "bad magic (path=/s/commitlog/00000000000000000000, offset=4096)"
    assert str(E.OffsetError("past the end", offset=0)) == "past the end (offset=0)"
    plain = E.ConfigError("no value")
    assert str(plain) == "no value" and plain.path is None and plain.offset is None
