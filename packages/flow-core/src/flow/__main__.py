"""``python -m flow``: command-line tools.

    python -m flow plugins            # every plugin found, its distribution, status, registrations
    python -m flow plugins --json     # the same as JSON
    python -m flow plugins --verbose  # do not shorten long lists

``FLOW_DISABLE_PLUGIN_AUTOLOAD=1`` and ``FLOW_PLUGINS=a,b`` apply as for any program. If a
plugin fails to load, the error (naming the plugin) goes to stderr, the installed entry
points are listed without loading them, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flow", description="flow command-line tools")
    sub = p.add_subparsers(dest="command", metavar="command")
    sub.required = True
    pl = sub.add_parser("plugins", help="list the plugins found and what each registered",
                        description="List every flow plugin found (entry-point group 'flow.plugins' and the "
                                    "built-ins), loaded or skipped, with its distribution and what it registered.")
    pl.add_argument("--json", action="store_true", help="print JSON instead of text")
    pl.add_argument("-v", "--verbose", action="store_true", help="show every registration (no shortening)")
    return p


def _plugins(args) -> int:
    from flow.errors import PluginError
    from flow.plugins import manager

    try:
        manager.ensure_loaded()
    except PluginError as e:
        print(f"error: {e}", file=sys.stderr)
        found = manager.discovered()
        if args.json:
            json.dump({"error": str(e), "discovered": found}, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            print("installed flow plugins (none loaded because of the error above):")
            for d in found:
                print(f"{d['name']}  [{d['distribution']} {d['version']}, entry point, not loaded]  {d['module']}")
        return 1
    manager._dump(sys.stdout, as_json=args.json, verbose=args.verbose)
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "plugins":
        return _plugins(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
