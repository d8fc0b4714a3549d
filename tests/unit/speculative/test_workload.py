"""The repetitive prompts: deterministic, lookup-friendly, and what each kind claims to be."""

from __future__ import annotations

from forklift.speculative import workload


def test_same_seed_same_text_other_seed_other_text() -> None:
    assert workload.module_text(8, 3) == workload.module_text(8, 3)
    assert workload.module_text(8, 3)[0] != workload.module_text(8, 4)[0]


def test_function_names_are_distinct_and_five_grams_mostly_unique() -> None:
    text, names = workload.module_text(40, 1)
    assert len(set(names)) == 40
    words = text.split()
    grams = [tuple(words[i:i + 5]) for i in range(len(words) - 4)]
    assert len(set(grams)) / len(grams) > 0.95  # prompt lookup finds one place to copy from


def test_copy_prompt_shows_the_module_twice_and_asks_for_it_again() -> None:
    p = workload.prompt("copy", functions=6, seed=2)
    module, _ = workload.module_text(6, 2)
    assert p.text.count(module) == 2 and p.expected == module
    assert p.text.endswith("copied exactly again:\n")


def test_edit_renames_exactly_one_function() -> None:
    p = workload.prompt("edit", functions=6, seed=0)
    module, names = workload.module_text(6, 0)
    renamed = [n for n in names if n not in p.expected]
    assert len(renamed) == 1 and "compute_total" in p.expected and renamed[0] in p.text


def test_prose_is_the_negative_control() -> None:
    assert workload.prompt("prose").expected == ""


def test_prompts_differ_per_request() -> None:
    ps = workload.prompts("copy", 3, seed=10)
    assert len({p.text for p in ps}) == 3
