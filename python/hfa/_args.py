"""Checks of the flash_attn-style scalar arguments, shared by every entry point of hfa.

hfa/__init__.py runs them before it hands a call to the torch or numpy front end, so both get
the same normalized values and the same errors (naming the argument), never a bare unpacking
error or a string taken as True.
"""

from __future__ import annotations

import numbers


def flag(value, name: str) -> bool:
    """A switch such as causal: bool (Python or numpy), or the int 0 or 1. Anything else (a
    string, None, 2, a float) raises TypeError naming the argument: bool("no") is True, so
    taking truthiness would silently turn a typo into a mask."""
    if value is True or value is False:
        return value
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool"):  # numpy 1 and 2
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name}: expected a bool, got {type(value).__name__} {value!r}")


def _side(value, name: str) -> int:
    if value is None:  # newer FlashAttention releases: None = unbounded
        return -1
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected (left, right) integers (-1 or None = unbounded), "
                        f"got {type(value).__name__} {value!r}")
    return int(value)


def window(window_size, name: str = "window_size") -> tuple:
    """(left, right) as ints, -1 (or None) = unbounded. A value of the wrong length raises
    ValueError, a non-integer side TypeError, both naming the argument. The library checks
    the range (window_left / window_right >= -1)."""
    if type(window_size) is tuple and len(window_size) == 2:  # the usual call: no more checks
        left, right = window_size
        if type(left) is int and type(right) is int:
            return window_size
    if isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__"):
        raise TypeError(f"{name}: expected a (left, right) pair, got "
                        f"{type(window_size).__name__} {window_size!r}")
    if len(window_size) != 2:
        raise ValueError(f"{name}: expected a (left, right) pair, got {len(window_size)} values "
                         f"{tuple(window_size)!r}")
    left, right = window_size
    return _side(left, name), _side(right, name)


_INT32 = 2 ** 31


def sm_margin(value, name: str = "sm_margin") -> int:
    """SMs to leave free for other kernels (FlashAttention-3's sm_margin): an integer (Python or
    numpy, not a bool) that fits the C ABI's int32, which ctypes would otherwise wrap silently.
    The library checks the range (>= 0, below the GPU's SM count) and names the argument."""
    if type(value) is int and -_INT32 <= value < _INT32:  # the usual call: no ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an integer (SMs left free), got "
                        f"{type(value).__name__} {value!r}")
    if not -_INT32 <= value < _INT32:
        raise ValueError(f"{name}: {value} does not fit the C ABI's int32")
    return int(value)
