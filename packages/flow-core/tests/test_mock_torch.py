"""flow.mock_torch: PyTorch scripts run unmodified on flow (in-process, as a script, for a shell)."""

from __future__ import annotations

import atexit
import importlib.util
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import types
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

import flow
import flow.mock_torch as mock_torch
from flow.errors import FeatureNotInstalledError
from flow.mock_torch import UnsupportedTorchAPIError
from flow.mock_torch import __main__ as cli

SCRIPTS = os.path.join(os.path.dirname(__file__), "torch_scripts")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(mock_torch.REPORT_ENV, None)
    env["PYTHONPATH"] = mock_torch._without_shim(env.get("PYTHONPATH"))
    return env


def _mock_run(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "flow.mock_torch", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=120)


def _losses(stdout: str, key: str = "loss") -> list[float]:
    return [float(m) for m in re.findall(rf"^step \d+ .*?\b{key} (\S+)", stdout, re.M)]


@pytest.fixture
def clean_mock():
    """Every test leaves the mock off and the recorded names empty, whatever it did."""
    mock_torch.clear_missing()
    yield
    while mock_torch.is_enabled():
        mock_torch.disable()
    mock_torch.clear_missing()


# --- in-process -----------------------------------------------------------------------------------


def test_imports_resolve_to_flow_modules(clean_mock):
    with mock_torch.enable():
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        import torch.optim.lr_scheduler as lr_scheduler
        from torch.utils.data import DataLoader

        assert torch.nn.Linear is flow.nn.Linear and nn.Conv2d is flow.nn.Conv2d
        assert F.relu is flow.nn.functional.relu
        assert DataLoader is flow.utils.data.DataLoader
        assert lr_scheduler.StepLR is flow.optim.lr_scheduler.StepLR
        assert torch.Tensor is flow.Tensor and torch.float32 is flow.float32
        assert torch.nn is nn and sys.modules["torch.nn.functional"] is F
        assert torch.random.manual_seed is flow._random.manual_seed  # a path that differs (MODULE_TABLE)
        x = torch.ones(2, 3)
        assert isinstance(x, flow.Tensor) and x.sum().item() == 6.0
    assert not mock_torch.is_enabled()
    assert not any(isinstance(m, mock_torch._finder.TorchModule) for m in sys.modules.values())


@pytest.mark.parametrize("torch_name", sorted(mock_torch.MODULE_TABLE))
def test_module_table_entries_resolve(torch_name, clean_mock):
    flow_module = importlib.import_module(mock_torch.MODULE_TABLE[torch_name])
    with mock_torch.enable():
        mod = importlib.import_module(torch_name)
        assert sys.modules[torch_name] is mod
        name = next(
            n
            for n in dir(flow_module)
            if not n.startswith("_") and not isinstance(getattr(flow_module, n), types.ModuleType)
        )
        assert getattr(mod, name) is getattr(flow_module, name)
    with mock_torch.enable():
        from torch.nn.modules.batchnorm import BatchNorm2d

        assert BatchNorm2d is flow.nn.BatchNorm2d


def test_star_import_gives_flows_public_names(clean_mock):
    ns: dict = {}
    with mock_torch.enable():
        exec("from torch import *\nfrom torch.nn import *", ns)
    assert ns["zeros"] is flow.zeros and ns["Tensor"] is flow.Tensor and ns["Linear"] is flow.nn.Linear
    assert not any(name.startswith("_") for name in ns if name != "__builtins__")


def test_missing_name_raises_attribute_error_and_is_recorded(clean_mock):
    with mock_torch.enable():
        import torch

        with pytest.raises(UnsupportedTorchAPIError, match=r"^torch\.nn\.no_such_layer is not supported by flow yet$"):
            torch.nn.no_such_layer  # noqa: B018
        with pytest.raises(AttributeError):  # hasattr() and getattr(.., default) keep working
            torch.no_such_fn()
        assert not hasattr(torch.nn.functional, "no_such_op")
        assert getattr(torch, "other_missing", 7) == 7
        assert hasattr(torch, "zeros")
        missing = mock_torch.missing_names()
    assert set(missing) == {"torch.nn.no_such_layer", "torch.no_such_fn", "torch.nn.functional.no_such_op",
                            "torch.other_missing"}  # fmt: skip
    assert missing["torch.nn.no_such_layer"].startswith(__file__ + ":")
    assert "first used at" in mock_torch.format_report(missing) and "torch.other_missing" in mock_torch.format_report()


def test_plugin_name_keeps_install_advice(clean_mock, monkeypatch):
    def flow_getattr(name):
        if name == "fancy_device":
            raise FeatureNotInstalledError("flow.fancy_device needs the 'flow-fancy' package: pip install flow-fancy")
        raise AttributeError(name)

    monkeypatch.setattr(flow.provided, "flow_getattr", flow_getattr)  # what flow.__getattr__ asks
    with mock_torch.enable():
        import torch

        advice = r"^torch\.fancy_device is not supported by flow yet \(.*flow-fancy\)$"
        with pytest.raises(UnsupportedTorchAPIError, match=advice):
            torch.fancy_device  # noqa: B018


def test_missing_module_import_raises_module_not_found(clean_mock):
    with mock_torch.enable():
        with pytest.raises(ModuleNotFoundError, match=r"^torch\.no_such_package is not supported by flow yet$") as e:
            import torch.no_such_package  # noqa: F401
        assert e.value.name == "torch.no_such_package"
        with pytest.raises(ImportError, match="cannot import name 'no_such_module' from 'torch.nn'"):
            from torch.nn import no_such_module  # noqa: F401
        assert {"torch.no_such_package", "torch.nn.no_such_module"} <= set(mock_torch.missing_names())


def test_enable_restores_modules_imported_before(clean_mock):
    fake = types.ModuleType("torch")  # stands for a real torch imported before the mock
    fake_nn = types.ModuleType("torch.nn")
    saved = {n: sys.modules.pop(n) for n in list(sys.modules) if n == "torch" or n.startswith("torch.")}
    sys.modules.update({"torch": fake, "torch.nn": fake_nn})
    try:
        with mock_torch.enable():
            import torch
            import torch.nn

            assert torch is not fake and torch.nn.Linear is flow.nn.Linear
            with mock_torch.enable():  # nested: the inner exit keeps the outer mock on
                pass
            assert mock_torch.is_enabled() and sys.modules["torch"] is torch
        assert sys.modules["torch"] is fake and sys.modules["torch.nn"] is fake_nn
        mock_torch.disable()  # off already: nothing happens
        assert sys.modules["torch"] is fake
    finally:
        for n in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
            del sys.modules[n]
        sys.modules.update(saved)


def test_enable_restores_real_torch(clean_mock):
    real = pytest.importorskip("torch")
    with mock_torch.enable():
        import torch

        assert torch is not real and torch.Tensor is flow.Tensor
    import torch

    assert torch is real and sys.modules["torch.nn"] is real.nn


def test_enable_subprocesses_sets_and_restores_pythonpath(clean_mock, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    with pytest.raises(TypeError, match="subprocesses must be a bool"):
        mock_torch.enable(subprocesses="yes")
    with mock_torch.enable(subprocesses=True):
        assert os.environ["PYTHONPATH"] == os.pathsep.join([mock_torch.SHIM_DIR, "/somewhere"])
        out = subprocess.run(
            [sys.executable, "-c", "import torch, flow; print(torch.nn.Linear is flow.nn.Linear)"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.stdout.strip() == "True", out.stderr
    assert os.environ["PYTHONPATH"] == "/somewhere" and mock_torch.SHIM_DIR not in sys.path
    with mock_torch.enable(subprocesses=True):
        with mock_torch.enable(subprocesses=True):  # nested: the outer one still reaches children after it
            pass
        assert sys.path[0] == mock_torch.SHIM_DIR and os.environ["PYTHONPATH"].startswith(mock_torch.SHIM_DIR)
    assert os.environ["PYTHONPATH"] == "/somewhere" and mock_torch.SHIM_DIR not in sys.path


def test_setting_a_module_attribute_reaches_flow(clean_mock):
    with mock_torch.enable():
        import torch.nn.functional as F

        F._mock_torch_test_flag = 3
    try:
        assert flow.nn.functional._mock_torch_test_flag == 3
    finally:
        del flow.nn.functional._mock_torch_test_flag


# --- command line -----------------------------------------------------------------------------------


def test_shell_form_mocks_every_python_it_starts(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text("import torch, flow\nprint('mocked', torch.nn.Linear is flow.nn.Linear)\n")
    shell = f'eval $({sys.executable} -m flow.mock_torch --report); {sys.executable} {script}; echo "PP=$PYTHONPATH"'
    out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=_env(), timeout=120)
    assert "mocked True" in out.stdout, out.stderr
    assert "every torch name this run used exists in flow" in out.stderr  # FLOW_MOCK_TORCH_REPORT=1
    assert out.stdout.split("PP=")[1].startswith(mock_torch.SHIM_DIR)


def test_cli_rejects_bad_arguments(tmp_path):
    assert cli.main(["--bogus"]) == 2
    assert cli.main([str(tmp_path / "nope.py")]) == 2
    assert cli.main(["disable", "extra"]) == 2


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method")
def test_report_lists_missing_names_also_when_the_script_fails(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(
        textwrap.dedent(
            """\
            import multiprocessing
            import torch
            from torch.utils.data import DataLoader

            def child():
                import torch
                hasattr(torch, "name_only_the_child_uses")

            class Data(torch.utils.data.Dataset):
                def __len__(self):
                    return 2

                def __getitem__(self, i):
                    hasattr(torch, "name_only_a_worker_uses")
                    return torch.ones(1)

            if __name__ == "__main__":
                p = multiprocessing.get_context("spawn").Process(target=child)
                p.start(); p.join()
                assert p.exitcode == 0
                list(DataLoader(Data(), num_workers=1, multiprocessing_context="fork"))
                assert not hasattr(torch.nn, "NoSuchModule")
                torch.no_such_function(1)
            """
        )
    )
    out = _mock_run("--report", str(script))
    assert out.returncode == 1
    assert "torch.no_such_function is not supported by flow yet" in out.stderr  # the traceback
    report = out.stderr[out.stderr.index("flow.mock_torch: 4 torch name(s)") :]
    where = re.escape(str(script))
    assert re.search(rf"^  torch\.nn\.NoSuchModule +first used at {where}:22$", report, re.M)
    assert re.search(rf"^  torch\.no_such_function +first used at {where}:23$", report, re.M)
    assert re.search(rf"^  torch\.name_only_the_child_uses +first used at {where}:7$", report, re.M)  # spawned
    assert re.search(rf"^  torch\.name_only_a_worker_uses +first used at {where}:14$", report, re.M)  # forked


def test_cli_passes_argv_and_exit_status(tmp_path, capsys, clean_mock):
    script = tmp_path / "argv.py"
    script.write_text("import sys, torch\nprint(sys.argv[1:], torch.__name__, torch.__file__)\nsys.exit(3)\n")
    argv, path = list(sys.argv), list(sys.path)
    assert cli.main([str(script), "--flag", "x"]) == 3
    assert capsys.readouterr().out.strip() == f"['--flag', 'x'] torch {flow.__file__}"
    assert sys.argv == argv and sys.path == path and not mock_torch.is_enabled()  # main() run in-process


def test_cli_runs_a_module(tmp_path, capsys, monkeypatch, clean_mock):
    (tmp_path / "mockpkg").mkdir()
    (tmp_path / "mockpkg" / "__init__.py").write_text("")
    (tmp_path / "mockpkg" / "train.py").write_text(
        "import sys, flow\nimport torch.nn\nprint(__name__, sys.argv[1:], torch.nn.Linear is flow.nn.Linear)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["-m", "mockpkg.train", "a"]) == 0
    assert capsys.readouterr().out.split() == ["__main__", "['a']", "True"]


def test_cli_disable_prints_what_undoes_enable(monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([mock_torch.SHIM_DIR, "/a b"]))
    assert cli.main(["disable"]) == 0
    assert capsys.readouterr().out == f"export PYTHONPATH='/a b'\nunset {mock_torch.REPORT_ENV}\n"
    monkeypatch.setenv("PYTHONPATH", mock_torch.SHIM_DIR)
    assert cli.main(["disable"]) == 0
    assert capsys.readouterr().out == f"unset PYTHONPATH\nunset {mock_torch.REPORT_ENV}\n"
    assert cli.main(["enable", "--report"]) == 0
    assert capsys.readouterr().out == f"export PYTHONPATH={mock_torch.SHIM_DIR}\nexport {mock_torch.REPORT_ENV}=1\n"


# --- PyTorch-style training scripts ---------------------------------------------------------------

_OUT_DIR = tempfile.mkdtemp(prefix="flow-mock-torch-test-")
atexit.register(shutil.rmtree, _OUT_DIR, True)
_HAVE_AMP = importlib.util.find_spec("flow_amp") is not None
# (script, its arguments for this test, what the output's per-step losses are called)
CASES = {
    "mnist": (
        "mnist_cnn.py",
        "--no-cuda --no-mps --num-workers 2 --epochs 1 --batch-size 16".split()
        + ["--save-model", os.path.join(_OUT_DIR, "mnist.pt")],
        "loss",
    ),
    "vae": ("vae.py", [], "loss"),
    "lstm": ("word_language_model.py", ["--epochs", "3"], "loss"),
    "transformer": ("word_language_model.py", ["--model", "Transformer", "--lr", "5", "--nlayers", "2"], "loss"),
    "dcgan": ("dcgan.py", [], "loss_D"),
    # the autocast branch of the script's `nullcontext() if float32 else torch.autocast(...)` (autocast
    # is flow-amp's: without it, the float32 branch)
    "nanogpt": ("nanogpt.py", ["--max_iters", "12", "--dtype", "bfloat16" if _HAVE_AMP else "float32"], "loss"),
}
# the cases also run under real torch where it is installed, with how far their first losses may be
# apart: the seeds are the same but the random streams are not, so only the loss at initialisation
# compares, and a small batch through dropout (mnist) or batch norm (dcgan) spreads it more
COMPARED = {"vae": 0.05, "lstm": 0.05, "transformer": 0.05, "nanogpt": 0.05, "mnist": 0.15, "dcgan": 0.15}

_TORCH_RUNNER = """
import contextlib, io, json, runpy, sys
out = {}
for name, (script, args) in json.loads(sys.argv[1]).items():
    sys.argv = [script, *args]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        runpy.run_path(script, run_name="__main__")
    out[name] = buf.getvalue()
print(json.dumps(out))
"""

_runs: dict[str, Future] = {}


def _torch_args(args: list[str]) -> list[str]:
    # real torch saves its own format: not over the file the flow run writes
    return [a + ".torch" if a.startswith(_OUT_DIR) else a for a in args]


def _start_runs() -> None:
    # each script is its own process (importing flow is a good part of its second or two): two at a
    # time keeps the file's wall time down without taking more than two cores
    if _runs:
        return
    pool = ThreadPoolExecutor(max_workers=2)
    if importlib.util.find_spec("torch") is not None:
        # one real-torch process runs every compared script (torch's import is the slow part)
        cases = {k: (os.path.join(SCRIPTS, CASES[k][0]), _torch_args(CASES[k][1])) for k in COMPARED}
        cmd = [sys.executable, "-c", _TORCH_RUNNER, json.dumps(cases)]
        _runs["torch"] = pool.submit(subprocess.run, cmd, capture_output=True, text=True, env=_env(), timeout=180)
    for case, (script, args, _) in CASES.items():
        _runs[case] = pool.submit(_mock_run, "--report", os.path.join(SCRIPTS, script), *args)
    pool.shutdown(wait=False)


def _run_case(case: str) -> subprocess.CompletedProcess:
    """The case's run through ``python -m flow.mock_torch --report`` (or "torch": the real-torch runs)."""
    _start_runs()
    return _runs[case].result()


@pytest.mark.parametrize("case", list(CASES))
def test_training_script_runs_and_learns(case):
    key = CASES[case][2]
    out = _run_case(case)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("done")
    assert "every torch name this run used exists in flow" in out.stderr
    losses = _losses(out.stdout, key)
    assert len(losses) >= 8
    assert all(v == v and abs(v) < 1e4 for v in losses)  # finite
    assert sum(losses[-3:]) / 3 < 0.9 * sum(losses[:3]) / 3, losses


def test_mnist_saves_a_state_dict_flow_loads():
    assert _run_case("mnist").returncode == 0
    state = flow.load(os.path.join(_OUT_DIR, "mnist.pt"))
    assert state["fc2.weight"].shape == (10, 32) and len(state) == 8


def test_mnist_with_device_probing():
    out = _mock_run(os.path.join(SCRIPTS, "mnist_cnn.py"), "--epochs", "1", "--num-samples", "32")
    assert out.returncode == 0, out.stderr


def test_nanogpt_compile():
    out = _mock_run(os.path.join(SCRIPTS, "nanogpt.py"), "--max_iters", "4", "--compile")
    assert out.returncode == 0, out.stderr


def test_saving_the_whole_model_asks_for_the_state_dict(tmp_path):
    out = _mock_run(os.path.join(SCRIPTS, "word_language_model.py"), "--epochs", "1", "--save", str(tmp_path / "m.pt"))
    assert out.returncode == 1 and "saved" not in out.stdout
    assert "CheckpointError: flow.save: cannot save the whole module __main__.RNNModel" in out.stderr
    assert "save module.state_dict()" in out.stderr


def test_first_losses_match_real_torch():
    pytest.importorskip("torch")
    torch_out = _run_case("torch")
    assert torch_out.returncode == 0, torch_out.stderr
    torch_out_by_case = json.loads(torch_out.stdout.splitlines()[-1])
    for k, rel in COMPARED.items():
        flow_out = _run_case(k)
        assert flow_out.returncode == 0, flow_out.stderr
        key = CASES[k][2]
        ours, theirs = _losses(flow_out.stdout, key), _losses(torch_out_by_case[k], key)
        assert len(ours) == len(theirs)
        assert ours[0] == pytest.approx(theirs[0], rel=rel), (k, ours[0], theirs[0])
