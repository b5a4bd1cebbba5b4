"""``python -m flow``: command-line tools.

    python -m flow plugins            # every plugin found, its distribution, status, registrations
    python -m flow plugins --json     # the same as JSON
    python -m flow plugins --verbose  # do not shorten long lists
    python -m flow op NAME            # every facet of an op: schema, meta rule, gradient, kernels per
                                      # device/dtype, out-variants, fusion lowering, rules, Python API,
                                      # each with its file:line and the plugin that registered it
    python -m flow op NAME --json     # the same as JSON

``plugins`` ends with the registrations more than one plugin claimed (who won, by priority or
override) and the rules queued for a table no loaded plugin declares. ``op`` with an unknown
name prints the close matches and exits with status 1.

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
    pl = sub.add_parser(
        "plugins",
        help="list the plugins found and what each registered",
        description="List every flow plugin found (entry-point group 'flow.plugins' and the "
        "built-ins), loaded or skipped, with its distribution and what it registered.",
    )
    pl.add_argument("--json", action="store_true", help="print JSON instead of text")
    pl.add_argument("-v", "--verbose", action="store_true", help="show every registration (no shortening)")
    op = sub.add_parser(
        "op",
        help="show every facet of one op",
        description="Show an op's schema, meta rule, gradient, kernels per device type and dtype "
        "(and what they override), out-variants, fusion lowering, rule-table entries "
        "and Python bindings, with file:line and the plugin that registered each.",
    )
    op.add_argument("name", help="the op's registered name (python -m flow plugins -v lists them)")
    op.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


def _op(args) -> int:
    from flow.errors import PluginError
    from flow.plugins import manager, op_info

    try:
        manager.ensure_loaded()
    except PluginError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        data = op_info.describe_op(args.name)
    except KeyError:
        close = op_info.close_matches(args.name)
        hint = f"; did you mean: {', '.join(close)}?" if close else "; python -m flow plugins -v lists every op"
        print(f"error: no op named '{args.name}' is registered{hint}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        op_info.format_op(data, sys.stdout)
    return 0


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
    if args.command == "op":
        return _op(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
