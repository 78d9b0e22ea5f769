"""Results shared by the three languages of a chapter within one test run (attnlab/shared_results.py)."""

import torch

from attnlab import shared_results, train as train_module
from attnlab.gpt import GPT, GPTConfig
from attnlab.train import train


def counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def test_without_the_variable_everything_is_computed(monkeypatch):
    monkeypatch.delenv(shared_results.VARIABLE, raising=False)
    compute, calls = counting({"x": torch.ones(2)})
    shared_results.cached("t", (1,), compute)
    shared_results.cached("t", (1,), compute)
    assert len(calls) == 2


def test_with_a_folder_the_second_call_loads_and_other_inputs_compute(monkeypatch, tmp_path):
    monkeypatch.setenv(shared_results.VARIABLE, str(tmp_path))
    compute, calls = counting({"x": torch.arange(3.0), "losses": [1.5, 2.5]})
    first = shared_results.cached("t", (torch.zeros(2), 3), compute)
    again = shared_results.cached("t", (torch.zeros(2), 3), compute)
    assert len(calls) == 1 and torch.equal(first["x"], again["x"]) and again["losses"] == [1.5, 2.5]
    shared_results.cached("t", (torch.ones(2), 3), compute)  # another tensor
    shared_results.cached("t", (torch.zeros(2, dtype=torch.float64), 3), compute)  # another dtype
    shared_results.cached("t", (torch.zeros(2), 4), compute)  # another argument
    assert len(calls) == 4


def test_the_key_changes_with_the_package_source(monkeypatch):
    before = shared_results.key("t", 1)
    monkeypatch.setattr(shared_results, "package_fingerprint", lambda: "edited")
    assert shared_results.key("t", 1) != before


def tiny_training(data):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.1))
    losses = train(model, data, steps=5, batch_size=4)
    return model, losses, torch.rand(3)


def test_a_loaded_training_equals_a_computed_one_weights_losses_and_random_state(monkeypatch, tmp_path):
    data = torch.randint(0, 20, (200,), generator=torch.Generator().manual_seed(1))
    monkeypatch.delenv(shared_results.VARIABLE, raising=False)
    reference, reference_losses, reference_draw = tiny_training(data)

    monkeypatch.setenv(shared_results.VARIABLE, str(tmp_path))
    trainings = []
    real_train = train_module._train
    monkeypatch.setattr(train_module, "_train", lambda *a: trainings.append(1) or real_train(*a))
    for _ in range(2):  # computed and stored, then loaded
        model, losses, draw = tiny_training(data)
        assert losses == reference_losses and torch.equal(draw, reference_draw) and not model.training
        for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
            assert torch.equal(a, b), name
    assert len(trainings) == 1


def test_a_model_with_code_from_outside_the_package_is_always_trained(monkeypatch, tmp_path):
    monkeypatch.setenv(shared_results.VARIABLE, str(tmp_path))
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16))

    class Mine(torch.nn.Module):  # defined here, not in attnlab: its source is not in the key
        def forward(self, x):
            return x

    model.extra = Mine()
    data = torch.randint(0, 20, (200,), generator=torch.Generator().manual_seed(1))
    train(model, data, steps=2, batch_size=4)
    assert not list(tmp_path.iterdir())
