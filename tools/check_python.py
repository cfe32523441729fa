"""Refuse a Python that is too old for the pinned requirements, with one clear sentence.

    python3 tools/check_python.py            # exit 0 when this Python is new enough, else 1
    python3 tools/check_python.py 3.10.12    # judge a given version instead (used by the tests)

The minimum is read from ``requires-python`` in pyproject.toml, so it is written in one place.
This script runs on the Python being judged, so it keeps to syntax that old interpreters parse
(no f-strings, no annotations) and needs nothing outside the standard library.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def minimum():
    """The version tuple of pyproject.toml's ``requires-python = ">=X.Y[.Z]"``."""
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        match = re.search(r'^requires-python\s*=\s*">=\s*(\d+(?:\.\d+){1,2})"', f.read(), re.M)
    if match is None:
        raise SystemExit("tools/check_python.py: pyproject.toml has no requires-python = \">=X.Y\" line")
    return tuple(int(part) for part in match.group(1).split("."))


def dotted(version):
    return ".".join(str(part) for part in version)


def main(argv):
    need = minimum()
    if argv:
        have = tuple(int(part) for part in argv[0].split(".")[:3])
        shown = argv[0]
    else:
        have = tuple(sys.version_info[:3])
        shown = "%s (%s)" % (dotted(have), sys.executable)
    if have >= need:
        return 0
    sys.stderr.write(
        "attention-notebooks needs Python %s or newer (its pinned numpy, scipy, matplotlib, ipython and "
        "transformers need 3.%d), but this is Python %s.\n"
        "Install a newer Python and name it, for example:  make install PYTHON=python%d.%d\n"
        % (dotted(need), need[1], shown, need[0], need[1] + (1 if len(need) > 2 and need[2] > 0 else 0)))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
