"""``python -m flow.mock_torch``: run a PyTorch script on flow, or mock torch for a whole shell.

    python -m flow.mock_torch [--report] script.py args...   # run the script with `torch` = flow
    python -m flow.mock_torch [--report] -m module args...   # the same for `python -m module`
    eval $(python -m flow.mock_torch [enable] [--report])     # print the shell's export lines
    eval $(python -m flow.mock_torch disable)                  # print the lines that undo them

``--report`` prints, when the run ends (also when it fails), every torch name the script and its
child processes used that flow does not have. The exit status is the script's.
"""

from __future__ import annotations

import os
import runpy
import shlex
import sys
import tempfile
import traceback

from flow import mock_torch

USAGE = __doc__.split("\n\n")[1]


def _exports(report: bool) -> str:
    lines = [f"export PYTHONPATH={shlex.quote(mock_torch._with_shim(os.environ.get('PYTHONPATH')))}"]
    lines.append(f"export {mock_torch.REPORT_ENV}=1" if report else f"unset {mock_torch.REPORT_ENV}")
    return "\n".join(lines) + "\n"


def _unexports() -> str:
    rest = mock_torch._without_shim(os.environ.get("PYTHONPATH"))
    first = f"export PYTHONPATH={shlex.quote(rest)}" if rest else "unset PYTHONPATH"
    return f"{first}\nunset {mock_torch.REPORT_ENV}\n"


def _run(target: str, as_module: bool, args: list[str], report: bool) -> int:
    report_file = None
    saved_env = os.environ.get(mock_torch.REPORT_ENV)
    if report:
        fd, report_file = tempfile.mkstemp(prefix="flow-mock-torch-", suffix=".txt")
        os.close(fd)
        os.environ[mock_torch.REPORT_ENV] = report_file  # child processes append their names here
        mock_torch._report_from_forks(report_file)
    saved_argv, saved_path = sys.argv, list(sys.path)
    mock_torch.enable(subprocesses=True)
    status = 0
    sys.argv = [target, *args]
    try:
        if as_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            # as `python script.py` does: the script's directory first on sys.path
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException as e:
        # the traceback from the script's own frames on, as `python script.py` would show it
        tb = e.__traceback__
        while tb is not None and (tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>")):
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb or e.__traceback__)
        status = 1
    finally:
        if report_file is not None:
            found = mock_torch.read_report_file(report_file)
            for name, where in mock_torch.missing_names().items():
                found.setdefault(name, where)
            sys.stdout.flush()
            sys.stderr.write(mock_torch.format_report(found))
            os.unlink(report_file)
        # called in-process (main([...])), the caller gets its interpreter state back
        mock_torch.disable()
        sys.argv, sys.path[:] = saved_argv, saved_path
        if saved_env is None:
            os.environ.pop(mock_torch.REPORT_ENV, None)
        else:
            os.environ[mock_torch.REPORT_ENV] = saved_env
    return status


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    report = False
    while argv and argv[0].startswith("-"):
        opt = argv.pop(0)
        if opt == "--report":
            report = True
        elif opt in ("-h", "--help"):
            print(USAGE)
            return 0
        elif opt == "-m":
            if not argv:
                print("python -m flow.mock_torch: -m needs a module name\n" + USAGE, file=sys.stderr)
                return 2
            return _run(argv[0], True, argv[1:], report)
        else:
            print(f"python -m flow.mock_torch: unknown option {opt!r}\n" + USAGE, file=sys.stderr)
            return 2
    if not argv or argv[0] in ("enable", "disable"):
        command, rest = (argv[0], argv[1:]) if argv else ("enable", [])
        if any(opt != "--report" for opt in rest):
            print(f"python -m flow.mock_torch {command}: unexpected arguments {rest}\n" + USAGE, file=sys.stderr)
            return 2
        sys.stdout.write(_exports(report or bool(rest)) if command == "enable" else _unexports())
        return 0
    script = argv[0]
    if not os.path.isfile(script):
        print(f"python -m flow.mock_torch: no such script: {script!r}\n" + USAGE, file=sys.stderr)
        return 2
    return _run(script, False, argv[1:], report)


if __name__ == "__main__":
    sys.exit(main())
