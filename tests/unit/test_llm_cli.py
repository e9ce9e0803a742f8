"""`parley llm generate` and `parley llm bench` on a tiny random checkpoint."""
import json

import pytest

from app.cli import main
from tests.checkpoints import single_thread  # noqa: F401 (autouse)
from tests.checkpoints import write_parley


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_parley(tmp_path_factory.mktemp("parley"))


def test_generate_prints_reply_and_stats(model_dir, capsys):
    assert main(["llm", "generate", "--model", str(model_dir), "--prompt", "Hello", "--max-new-tokens", "16",
                 "--block-length", "8", "--steps", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("[") and "passes" in out[-1] and "stopped:" in out[-1]


def test_bench_measures_every_method_against_the_baseline(model_dir, capsys):
    assert main(["llm", "bench", "--model", str(model_dir), "--repeats", "1", "--max-new-tokens", "16",
                 "--block-length", "8", "--steps", "2", "--ignore-eos", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {row["method"]: row for row in report["rows"]}
    assert len(rows) == 7
    baseline = rows["autoregressive (causal, KV cache)"]
    assert baseline["speed_vs_ar"] == 1.0 and baseline["tokens_per_pass"] == 1.0 and baseline["tokens"] == 16
    assert rows["steps 2/block, prefix cache"]["tokens_per_pass"] == 4.0
    assert rows["steps 2/block, no cache"]["passes"] == 4


def test_bench_prints_a_table(model_dir, capsys):
    assert main(["llm", "bench", "--model", str(model_dir), "--repeats", "1", "--max-new-tokens", "8",
                 "--block-length", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:3] == ["method", "passes", "tokens"] and len(lines) == 3 + 7


def test_bad_model_directory_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert main(["llm", "generate", "--model", str(tmp_path)]) == 2
    assert "unknown model_type 'gpt2'" in capsys.readouterr().err


def test_callers_at_once_write_what_they_write_one_after_another(tmp_path):
    """llm.bench.run_callers: N replies on threads at once, sharing forwards, against one after another."""
    import llm
    from llm.bench import format_callers, run_callers
    from llm.blockdiff import BlockOptions
    from llm.engine import Engine

    loaded = llm.load(write_parley(tmp_path, shift_logits=True), device="cpu")
    engine = Engine(loaded.model, loaded.tokenizer, loaded.chat_style, loaded.special, left_to_right=True)
    decode = BlockOptions(max_new_tokens=12, block_length=1, threshold=1.0, stop_at_eos=False, draft_length=4)
    rows = run_callers(engine, [{"role": "user", "content": "Hello there"}], decode, [1, 3], repeats=1)
    assert [r["callers"] for r in rows] == [1, 3] and all(r["same_replies"] for r in rows)
    assert rows[1]["passes"] >= 3 * rows[0]["passes"] - 3 and 1 <= rows[1]["forwards"] <= rows[1]["passes"]
    assert format_callers(rows).splitlines()[2].split()[0] == "1"
    with pytest.raises(ValueError, match="must be >= 1"):
        run_callers(engine, [{"role": "user", "content": "Hi"}], decode, [0], repeats=1)


def test_bench_with_a_profile_runs_the_brains_row_again_after_studying_its_dialogues(tmp_path):
    """`parley llm bench --profile`: the last row (the brain's decoding) once more after the drafter studied the
    business's dialogues, as `parley serve` has it; the same tokens, whatever the guesses."""
    import llm
    from llm.bench import BenchOptions, run_bench
    from llm.engine import Engine

    loaded = llm.load(write_parley(tmp_path, shift_logits=True), device="cpu")
    engine = Engine(loaded.model, loaded.tokenizer, loaded.chat_style, loaded.special, left_to_right=True)
    messages = [{"role": "user", "content": "Hello there"}]
    studied = []

    def study():
        studied.append(True)
        engine.study([[{"role": "system", "content": "S"}, {"role": "user", "content": "Hello there"},
                       {"role": "assistant", "content": "Hi, how can I help?"}]])

    rows = run_bench(engine, messages, BenchOptions(max_new_tokens=8, repeats=1, stop_at_eos=False), study)
    assert studied == [True]
    assert rows[-1]["method"] == rows[-2]["method"] + ", studied" and rows[-1]["tokens"] == rows[-2]["tokens"]
    assert len(run_bench(engine, messages, BenchOptions(max_new_tokens=8, repeats=1, stop_at_eos=False))) == \
        len(rows) - 1


def test_a_wrong_profile_is_one_line_before_the_model_loads(tmp_path, capsys):
    assert main(["llm", "bench", "--model", str(tmp_path / "no-model"), "--profile", str(tmp_path / "no.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no.yaml" in err and "cannot read the profile" in err and "no-model" not in err
