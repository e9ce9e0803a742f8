"""The `parley` command line: subcommands registered, bad audio files refused with exit code 2 and a reason."""
import subprocess
import sys

import pytest

from app.cli import build_parser


def parley(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_every_public_subcommand_is_registered():
    choices = build_parser()._subparsers._group_actions[0].choices
    for name in ("serve", "converse"):
        assert name in choices


def test_a_command_imports_only_its_own_module():
    """`parley serve --help` and `parley llm bench` need neither the training side nor each other's stacks: a
    machine that only benchmarks the LLM runs it without the speech stack installed. And `parley --help` (every
    command's parser) answers before torch loads."""
    probe = ("import sys; from app.cli import build_parser; build_parser({argv!r}); "
             "print(sorted({{m.split('.')[0] for m in sys.modules}} & "
             "{{'torch', 'speech', 'faster_whisper', 'fastapi'}}))")
    for argv in ([], ["serve", "--help"], ["-v", "llm", "bench"], ["converse", "--in", "a.wav"]):
        out = subprocess.run([sys.executable, "-c", probe.format(argv=argv)], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == "[]", (argv, out.stdout, out.stderr)


@pytest.mark.parametrize("content, reason", [
    (b"this is not audio at all", "not a wav"),
    (b"RIFF\x24\x00\x00\x00WAVEfmt ", "truncated"),
    (b"", "empty"),
])
def test_converse_refuses_bad_files_with_exit_code_2(tmp_path, content, reason):
    bad = tmp_path / "question.wav"
    bad.write_bytes(content)
    result = parley("converse", "--in", str(bad), "--out", str(tmp_path / "reply.wav"))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert str(bad) in result.stderr and reason in result.stderr.lower(), result.stderr
    assert not (tmp_path / "reply.wav").exists()


def test_converse_missing_file_is_a_clear_error(tmp_path):
    result = parley("converse", "--in", str(tmp_path / "nope.wav"), "--out", str(tmp_path / "r.wav"))
    assert result.returncode == 2 and "Traceback" not in result.stderr and "nope.wav" in result.stderr


@pytest.fixture
def operator(monkeypatch, capsys):
    """parley's main in this process, where loading a model fails the test: returns (exit code, stderr)."""
    from app.cli import main
    from app.pipeline.services import Services

    def no_loading(settings):
        raise AssertionError("the mistake was found after the models began to load")

    monkeypatch.setattr(Services, "load", no_loading)

    def run(*args, env=None):
        with monkeypatch.context() as m:
            for name, value in (env or {}).items():
                m.setenv(name, value)
            code = main(list(args))
        return code, capsys.readouterr().err

    return run


def test_operator_mistakes_are_one_line_and_exit_2_before_any_model_loads(operator, tmp_path, synthesizer):
    from speech.audio import write_wav

    question = tmp_path / "q.wav"
    write_wav(str(question), synthesizer.synthesize("Hello."), synthesizer.sample_rate_hz)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("name: [unclosed\n")
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        cases = [  # (arguments, environment, what the line must name)
            (("serve", "--llm-device", "gpu"), {}, "--llm-device 'gpu'"),
            (("serve", "--llm-device", "cuda:99"), {}, "--llm-device cuda:99"),   # no such GPU, here or on one
            (("serve",), {"PARLEY_PORT": "abc"}, "PARLEY_PORT='abc'"),
            (("serve",), {"PARLEY_LLM_BATCH": "0"}, "PARLEY_LLM_BATCH=0"),
            (("serve",), {"PARLEY_TRANSFER_TO": "the front desk"}, "PARLEY_TRANSFER_TO: 'the front desk'"),
            (("serve", "--port", port), {}, f"127.0.0.1:{port}: already in use"),
            (("serve", "--profile", str(bad_yaml)), {}, "not valid YAML"),
            (("chat", "--profile", str(bad_yaml)), {}, "line 2"),
            (("converse", "--in", str(question), "--out", str(tmp_path / "missing" / "r.wav")), {}, "no such directory"),
        ]
        for args, env, named in cases:
            code, err = operator(*args, env=env)
            assert code == 2, (args, err)
            assert err.count("\n") == 1 and named in err and err.startswith(f"parley {args[0]}: "), (args, err)


def test_parley_computes_denormal_floats_as_zeros_in_every_cpu_thread():
    """app.cli.flush_denormals runs before torch starts its threads, which inherit it: a trained model's denormal
    activations made training steps ~1.6x slower."""
    code = ("import torch; from app.cli import flush_denormals; {} torch.set_num_threads(2); "
            "x = torch.full((1 << 20,), 1e-39); print(float((x * 1.0).sum()), float((x * 1.0)[-1]))")
    for flush, zero in (("flush_denormals();", True), ("", False)):
        out = subprocess.run([sys.executable, "-c", code.format(flush)], capture_output=True, text=True, timeout=60)
        total, last = map(float, out.stdout.split())
        assert (total == last == 0.0) is zero, out.stdout


def test_eval_prints_the_scores_with_and_without_the_tools_grammar(tmp_path):
    """`parley eval` replays held-out dialogues through the agent and prints its scores (here a tiny random model:
    what is checked is the command, not the model); --free-calls turns the tools' schemas off."""
    import json

    from tests.checkpoints import write_parley

    model = ("--llm-model", str(write_parley(tmp_path, max_sequence_length=4096)), "--llm-device", "cpu")
    runs = {}
    for flags in ((), ("--free-calls",)):
        result = parley("eval", "--dialogues", "2", "--threads", "1", "--json", *model, *flags, timeout=300)
        assert result.returncode == 0, result.stderr
        runs[flags] = json.loads(result.stdout)
    for summary in runs.values():
        assert summary["tool_call_turns"] > 0 and 0 <= summary["tool_call_exact_match"] <= 1
    table = parley("eval", "--dialogues", "1", "--threads", "1", *model, timeout=300).stdout
    assert "tool calls free" in table and "tool-call exact match" in table
