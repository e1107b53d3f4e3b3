"""One exception tree for the whole of kflashpy.

Every error the library raises on purpose is a :class:`KflashError`. Each carries a
stable process exit code (so scripts can tell a bad input from a flaky cable) and a
hint that tells the user what to do next. The CLI renders ``message`` and ``hint`` on
one or two lines; it never shows a traceback for these.

Exit codes (documented in the README, stable across releases):

====  ==========================================================
0     success
1     device or serial error (no port, no answer, protocol failure)
2     bad input or usage (files, addresses, layouts, kmodels, keys)
3     verification mismatch (flash contents, board vs host, seal)
4     internal error (a bug in kflashpy: please report it)
130   interrupted by Ctrl-C
====  ==========================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_DEVICE = 1
EXIT_INPUT = 2
EXIT_MISMATCH = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130


class KflashError(Exception):
    """Base of every error kflashpy raises deliberately.

    ``message`` says what went wrong and names the file, address or field;
    ``hint`` says what to do about it (may be empty).
    """

    exit_code: int = EXIT_INTERNAL
    #: short machine-readable kind used in ``--json`` output
    kind: str = "error"

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


# --- bad input (exit 2) -------------------------------------------------------


class InputError(KflashError):
    """The user gave us something we cannot use: a file, an address, an option."""

    exit_code = EXIT_INPUT
    kind = "input"


class UsageError(InputError):
    """Options that contradict each other or are missing."""

    kind = "usage"


class FormatError(InputError):
    """A file's bytes do not follow its format (kfpkg, boot image, kmodel, ELF...)."""

    kind = "format"


class LayoutError(InputError):
    """A flash plan that would damage what is already planned (overlap, past end, ...)."""

    kind = "layout"


class KeyMaterialError(InputError):
    """A key that is missing, malformed or of the wrong length (never shows the key)."""

    kind = "key"


# --- device and serial (exit 1) -------------------------------------------------


class DeviceError(KflashError):
    """Anything that went wrong between us and the board."""

    exit_code = EXIT_DEVICE
    kind = "device"


class PortError(DeviceError):
    """The serial port cannot be found, opened or used."""

    kind = "port"


class NoResponseError(DeviceError):
    """The board did not answer in time."""

    kind = "timeout"


class ProtocolError(DeviceError):
    """The board answered, but not what the protocol allows."""

    kind = "protocol"


class UnsupportedError(DeviceError):
    """The connected flasher or firmware lacks a capability this command needs."""

    kind = "unsupported"


# --- mismatches (exit 3) ---------------------------------------------------------


class MismatchError(KflashError):
    """What is there is not what should be there."""

    exit_code = EXIT_MISMATCH
    kind = "mismatch"


class VerifyError(MismatchError):
    """Flash contents differ from what was written."""

    kind = "verify"


class IntegrityError(MismatchError):
    """A sealed container or a hash that does not authenticate (tampered or wrong key)."""

    kind = "integrity"


class CompareMismatch(MismatchError):
    """The board's model outputs differ from the host reference beyond tolerance."""

    kind = "compare"


# --- unsupported on purpose (exit 2) ----------------------------------------------


class NotImplementedOpError(InputError):
    """A model uses an operator the host runtime does not implement (named in message)."""

    kind = "not-implemented"


# --- interrupted (exit 130) ------------------------------------------------------------


class Interrupted(KflashError):
    """Ctrl-C during a device operation; the message says what was and was not done."""

    exit_code = EXIT_INTERRUPTED
    kind = "interrupted"
