#!/usr/bin/env python3
"""Plays the user at a command's terminal: waits for output, types, signals, hangs up; reports how it ended and the terminal's state.

It reports the command's exit status, whether the command put the terminal in raw mode and
whether it restored the terminal's settings.

usage: ttydrive.py [--pipe] [--timeout SECS] LOG [STEP...] -- CMD [ARG...]

CMD runs in a new session with the pseudo-terminal as its controlling terminal and as its stdin,
stdout and stderr (--pipe: stdin a pipe, stdout and stderr another). Its output goes to LOG as it
comes, with the terminal's "\\r\\n" (and "\\r\\r\\n") written as "\\n". Steps, in order (each
one argument):
  wait:REGEX     until the output so far matches REGEX (Python re, multi-line)
  absent:REGEX   fails when the output so far matches REGEX
  send:TEXT      types TEXT (Python escapes: \\n, \\x01); on a terminal each byte goes through the
                 line discipline as a typed one (TIOCSTI), so it is in the input queue at once
  read           until CMD has read everything typed so far (the input queue is empty)
  taken          until CMD has read at least one byte typed since the last read or taken step
  sh:COMMAND     runs COMMAND with bash; fails unless it exits 0
  kill:SIG       sends signal SIG (TERM, HUP, INT...) to CMD
  hangup         closes the terminal's master side: the kernel hangs the terminal up
After the steps it waits for CMD to exit. Everything together must take at most --timeout seconds
(default 120); then CMD is killed. It prints one line:
  status=N raw=0|1 restored=0|1|- before=STTY after=STTY
status: CMD's exit status (128+N when a signal N killed it, as the shell says); raw: the terminal's
flow control (IXON) was turned off at some point, which raw mode does (seen through the master's
packet mode, TIOCPKT, an event rather than a sample); restored: `stty -g` of the terminal after CMD
exited equals what it was before CMD started ('-' with --pipe or after a hangup). When a step
fails: "error: step K (STEP): WHY" (CMD killed); when this machine cannot type into a terminal:
"skip: WHY".
"""
import codecs
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

TIOCPKT_NOSTOP = 16
TIOCPKT_DOSTOP = 32


class StepError(Exception):
    pass


class Drive:
    def __init__(self, log, pipe, timeout):
        self.log = open(log, "wb")
        self.pipe = pipe
        self.deadline = time.monotonic() + timeout
        self.out = b""
        self.raw = False
        self.cr = b""  # the '\r's that ended the last chunk (a "\r\n" split across reads)
        self.status = None
        self.typed = 0  # bytes typed so far; typed - queued() is what CMD has read
        self.mark = 0  # what CMD had read at the last read or taken step
        self.hung_up = False

    def start(self, argv):
        if self.pipe:
            self.in_r, self.in_w = os.pipe()
            self.out_r, out_w = os.pipe()
            fds = (self.in_r, out_w, out_w)
            self.queue_fd = self.in_r  # FIONREAD on the read end: bytes not yet read
        else:
            self.master, self.slave = os.openpty()
            fcntl.ioctl(self.master, termios.TIOCPKT, struct.pack("i", 1))
            self.out_r = self.master
            self.queue_fd = self.slave
            fds = (self.slave,) * 3
            self.before = self.stty()
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                for i, fd in enumerate(fds):
                    os.dup2(fd, i)
                if not self.pipe:
                    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                os.execvp(argv[0], argv)
            finally:
                os._exit(127)
        self.pid = pid
        if self.pipe:
            os.close(out_w)

    def stty(self):
        r = subprocess.run(["stty", "-g"], stdin=self.slave, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else "error:" + r.stderr.strip()

    def take_output(self, data):
        if not self.pipe:
            if data[0] != 0:  # a status packet: flow control switched (raw mode on or off)
                if data[0] & (TIOCPKT_NOSTOP | TIOCPKT_DOSTOP):
                    # DOSTOP overwrites a NOSTOP not yet read: either means IXON was off.
                    self.raw = True
                return
            data = data[1:]
        # The terminal's ONLCR makes a "\n" "\r\n" (and a guest's "\r\n" "\r\r\n").
        text = self.cr + data
        keep = len(text) - len(text.rstrip(b"\r"))
        self.cr = text[len(text) - keep:]
        text = re.sub(rb"\r+\n", b"\n", text[:len(text) - keep])
        self.out += text
        self.log.write(text)
        self.log.flush()

    def pump(self, wait):
        """Reads what output there is (waiting up to `wait` s for some); reaps CMD."""
        if self.out_r is not None:
            r, _, _ = select.select([self.out_r], [], [], wait)
            if r:
                try:
                    data = os.read(self.out_r, 65536)
                except OSError:
                    data = b""
                if data:
                    self.take_output(data)
                elif self.pipe:
                    os.close(self.out_r)
                    self.out_r = None
        elif wait:
            time.sleep(wait)
        if self.status is None:
            p, st = os.waitpid(self.pid, os.WNOHANG)
            if p:
                self.status = os.waitstatus_to_exitcode(st)
                if self.status < 0:
                    self.status = 128 - self.status

    def until(self, cond, what):
        while not cond():
            if time.monotonic() > self.deadline:
                raise StepError("timed out waiting for " + what)
            if self.status is not None and not cond():
                self.pump(0)
                if not cond():
                    raise StepError("the command exited (status %d) before %s" %
                                    (self.status, what))
            self.pump(0.05)

    def queued(self):
        return struct.unpack("i", fcntl.ioctl(self.queue_fd, termios.FIONREAD, b"\0" * 4))[0]

    def consumed(self):
        return self.typed - self.queued()

    def send(self, data):
        if self.pipe:
            os.write(self.in_w, data)
        else:
            for b in data:
                fcntl.ioctl(self.slave, termios.TIOCSTI, bytes([b]))
        self.typed += len(data)

    def step(self, s):
        kind, _, arg = s.partition(":")
        if kind == "wait":
            rx = re.compile(arg.encode(), re.M)
            self.until(lambda: rx.search(self.out), "/%s/ in the output" % arg)
        elif kind == "absent":
            m = re.search(arg.encode(), self.out, re.M)
            if m:
                raise StepError("the output has /%s/: %r" % (arg, m.group(0)[:100]))
        elif kind == "send":
            self.send(codecs.escape_decode(arg.encode())[0])
        elif kind == "read":
            self.until(lambda: self.queued() == 0, "the input to be read")
            self.mark = self.typed
        elif kind == "taken":
            self.until(lambda: self.consumed() > self.mark, "the command to read what was typed")
            self.mark = self.consumed()
        elif kind == "sh":
            r = subprocess.run(["bash", "-c", arg], capture_output=True, text=True)
            if r.returncode:
                why = (r.stdout + r.stderr).strip()[:300]
                raise StepError("exit status %d: %s" % (r.returncode, why))
        elif kind == "kill":
            os.kill(self.pid, getattr(signal, "SIG" + arg))
        elif kind == "hangup" and not self.pipe:
            os.close(self.master)
            self.out_r = None
            self.hung_up = True
        else:
            raise StepError("unknown step")

    def finish(self):
        self.until(lambda: self.status is not None, "the command to exit")
        # What it wrote before it exited is all there: read it off.
        while self.out_r is not None:
            r, _, _ = select.select([self.out_r], [], [], 0)
            if not r:
                break
            self.pump(0)


def main(argv):
    pipe, timeout = False, 120.0
    while argv and argv[0].startswith("--") and argv[0] != "--":
        opt = argv.pop(0)
        if opt == "--pipe":
            pipe = True
        elif opt == "--timeout":
            timeout = float(argv.pop(0))
        else:
            sys.exit("ttydrive: unknown option " + opt)
    if "--" not in argv or len(argv) < 3:
        sys.exit(__doc__)
    cut = argv.index("--")
    log, steps, cmd = argv[0], argv[1:cut], argv[cut + 1:]
    d = Drive(log, pipe, timeout)
    if not pipe:
        # Typing goes through TIOCSTI: make sure this machine allows it before starting.
        m, s = os.openpty()
        try:
            fcntl.ioctl(s, termios.TIOCSTI, b"x")
        except OSError as e:
            print("skip: cannot type into a pseudo-terminal (TIOCSTI: %s)" % e.strerror)
            return 0
        finally:
            os.close(m)
            os.close(s)
    d.start(cmd)
    try:
        for k, s in enumerate(steps, 1):
            try:
                d.step(s)
            except StepError as e:
                raise StepError("step %d (%s): %s" % (k, s[:60], e))
        d.finish()
    except StepError as e:
        if d.status is None:
            os.kill(d.pid, signal.SIGKILL)
            os.waitpid(d.pid, 0)
        print("error: %s" % e)
        return 0
    if pipe or d.hung_up:
        print("status=%d raw=%d restored=-" % (d.status, d.raw))
    else:
        after = d.stty()
        print("status=%d raw=%d restored=%d before=%s after=%s" %
              (d.status, d.raw, d.before == after, d.before, after))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
