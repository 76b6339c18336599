"""The terminal of an audit: what this process and every process it starts (the Dask workers,
their nannies' processes) write to standard error goes through a relay that copies it to the
terminal and to a log file; once the run is interrupted or over, to the log file only.

SIGINT to a process group reaches every worker at once, and each printed its own traceback
(``KeyboardInterrupt`` in ``spawn_main``, "cannot schedule new futures after shutdown", "Nanny
failed to start": about 150 lines before the one that mattered), and a normal exit printed a
Dask heartbeat's ``CommClosedError``: these go to the log, which the command's last line names.

While a live progress display is drawn (``flows.progress``), the relay writes the lines it
copies through the display's console, whole lines only, so that they scroll above the display.
"""
from __future__ import annotations

import os
import select
import sys
import tempfile
import threading
import time
from pathlib import Path


def log_folder() -> Path:
    """``AEQUUM_LOG_DIR``, or ``aequum-logs-UID`` in the temporary folder."""
    return Path(os.environ.get("AEQUUM_LOG_DIR") or Path(tempfile.gettempdir()) / f"aequum-logs-{os.getuid()}")


class Terminal:
    """Standard error (file descriptor 2, inherited by every process started later) relayed to
    the terminal and to ``log`` (:meth:`quiet`: to the log only). A context manager; the
    terminal is standard error again when it exits."""

    IDLE = 0.05  # seconds without output after which the relay counts as caught up

    def __init__(self, name: str):
        folder = log_folder()
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
        self.loud = True
        self._console = None  # a rich Console drawing live progress on the terminal (attach_console)
        self._pending = b""
        self._show_lock = threading.Lock()
        self._idle = threading.Event()
        self._closed = False
        self._log = open(self.path, "ab", buffering=0)
        sys.stderr.flush()
        self._terminal = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self._thread = threading.Thread(target=self._relay, args=(read,), name="aequum-terminal", daemon=True)
        self._thread.start()

    def _relay(self, read: int) -> None:
        with os.fdopen(read, "rb", buffering=0) as pipe:
            while True:
                if not select.select([pipe], [], [], self.IDLE)[0]:
                    self._idle.set()  # nothing came for IDLE seconds: all written so far is relayed
                    continue
                chunk = pipe.read(65536)
                if not chunk:
                    break
                self._log.write(chunk)
                if self.loud:
                    self._show(chunk)
        self._idle.set()

    def _show(self, data: bytes) -> None:
        """``data`` to the terminal: as it is, or while a console draws progress, its whole
        lines printed through that console (the rest of a line waits for its end)."""
        with self._show_lock:
            if self._closed:
                return
            if self._console is None:
                os.write(self._terminal, data)
                return
            from rich.text import Text

            *lines, self._pending = (self._pending + data).split(b"\n")
            for line in lines:
                self._console.print(Text.from_ansi(line.decode(errors="replace")), soft_wrap=True)

    def attach_console(self):
        """A rich Console on the terminal through which the relay writes from now on."""
        from rich.console import Console

        with self._show_lock:
            if self._console is None:
                self._console = Console(file=os.fdopen(os.dup(self._terminal), "w", buffering=1),
                                        force_terminal=True, stderr=False)
            return self._console

    def detach_console(self) -> None:
        """The relay writes to the terminal directly again (a line still unfinished first)."""
        with self._show_lock:
            console, self._console = self._console, None
            pending, self._pending = self._pending, b""
        if console is not None:
            console.show_cursor(True)  # a live display hides it while it draws
            console.file.flush()
            console.file.close()
            if pending:
                os.write(self._terminal, pending)

    def say(self, line: str) -> None:
        """``line`` to the terminal (quiet or not) and to the log."""
        data = f"{line}\n".encode()
        self._show(data)
        self._log.write(data)

    def quiet(self) -> None:
        """From now on, what is written to standard error goes to the log file only."""
        self.loud = False

    def close(self) -> None:
        """Standard error is the terminal again; what the relay holds is written first (the
        processes still writing to it, if any, keep writing to the log)."""
        self.detach_console()
        sys.stderr.flush()
        os.dup2(self._terminal, 2)
        # what was written before is relayed once the pipe has been quiet for IDLE seconds
        # (not at its end: the processes the run started still hold it, so waiting for the
        # relay thread's end waited its whole timeout, 2 s, at the end of every audit)
        self._idle.clear()
        self._idle.wait(timeout=2)
        with self._show_lock:  # what comes later goes to the log only
            self.loud, self._closed = False, True
            os.close(self._terminal)

    def __enter__(self) -> Terminal:
        _CURRENT.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.remove(self)
        self.close()
        _LAST[:] = [self.path]


_CURRENT: list[Terminal] = []
_LAST: list[Path] = []  # the log file of the last Terminal closed


def quiet() -> Terminal | None:
    """The current :class:`Terminal` of this process made quiet (an interrupt, a run's end), if any."""
    if _CURRENT:
        _CURRENT[-1].quiet()
        return _CURRENT[-1]
    return None


def log_path() -> Path | None:
    """The log file of the current :class:`Terminal`, or of the last one closed, if any."""
    return _CURRENT[-1].path if _CURRENT else (_LAST[-1] if _LAST else None)


def terminal_fd() -> int | None:
    """The terminal's file descriptor of the current :class:`Terminal` (its standard error
    before the relay), or None."""
    return _CURRENT[-1]._terminal if _CURRENT else None


def live_console():
    """A rich Console drawing on the current :class:`Terminal`, which then writes what it
    relays through it (:meth:`Terminal.attach_console`); None without a Terminal."""
    return _CURRENT[-1].attach_console() if _CURRENT else None


def detach_console() -> None:
    if _CURRENT:
        _CURRENT[-1].detach_console()


def say(line: str) -> None:
    """``line`` to the terminal even when it is quiet (to standard error without a Terminal)."""
    if _CURRENT:
        _CURRENT[-1].say(line)
    else:
        print(line, file=sys.stderr, flush=True)
