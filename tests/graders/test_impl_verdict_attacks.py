"""Attacks on what crosses the sandbox boundary and on how rewards are decided (issue 11 items
3 to 6), one test each, through the real grading path with real sandbox children. Each asserts a
reward of 0 on a scored outcome, no hidden input or expected value in the response, and for the
costly ones a bounded cost to the service."""

from __future__ import annotations

import hashlib
import inspect
import json
import random

import pytest

from app.graders.impl_verdict import Reason
from app.tasks.impl import reference
from app.tasks.impl.exercises import BY_NAME
from tests.sandbox.tiers import offered_tiers, tier_settings, without_filtered_twins
from tests.support.verdict_attacks import SETTINGS, assert_earned_nothing, grade_hostile

# Sandboxed children: left out of `make test-fast`, and run alone by `make test` (serial): their
# wall and CPU limits are what they test, and other tests' load on two cores breaks them.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


def reasons(graded) -> set[str]:
    return {c["reason"] for c in graded.result.details["cases"]}


def frame_writer(payload_expr: str, entry: str = "kv_cache_bytes", setup: str = "") -> str:
    """A submission that writes raw bytes (payload_expr, evaluated in the child) to every
    descriptor it holds past stderr, the reporter's pipe among them, and exits before the
    harness can send its own result."""
    return f"""
        import os
        {setup}
        def {entry}(*args, **kwargs):
            data = {payload_expr}
            for fd in range(3, 64):
                try:
                    os.set_blocking(fd, True)
                    os.write(fd, data)
                except OSError:
                    pass
            os._exit(0)
    """


def value_frame(value_json: str) -> str:
    """A well-framed value message around value_json (a Python expression giving JSON text)."""
    body = f"('{{\"kind\": \"value\", \"value\": ' + {value_json} + '}}').encode()"
    return f"(lambda b: len(b).to_bytes(8, 'big') + b)({body})"


# ---------------------------------------------------------------- fake JAX arrays


def test_jax_array_subclass_with_faked_sharding_earns_nothing() -> None:
    graded = grade_hostile("jax_shard_rows", """
        import jax, numpy as np

        class Shard:
            def __init__(self, data):
                self.data = data

        class Fake(jax.Array):
            def __init__(self, x):
                self._x = np.asarray(x)
            shape = property(lambda self: self._x.shape)
            dtype = property(lambda self: self._x.dtype)
            sharding = property(lambda self: type("S", (), {"spec": ("data", None), "device_set": set(range(8)),
                                                           "is_fully_replicated": False,
                                                           "mesh": type("M", (), {"shape": {"data": 8}})()})())
            addressable_shards = property(lambda self: [Shard(p) for p in np.split(self._x, 8)])
            def __array__(self, dtype=None, copy=None):
                return self._x

        def shard_rows(x):
            return Fake(x)
    """)
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.unsupported_value}


def test_duck_typed_array_earns_nothing() -> None:
    graded = grade_hostile("jax_shard_rows", """
        import numpy as np

        class Duck:
            def __init__(self, x):
                self.x = np.asarray(x)
                self.shape, self.dtype = self.x.shape, self.x.dtype
            def __array__(self, dtype=None, copy=None):
                return self.x
            def tolist(self):
                return self.x.tolist()

        def shard_rows(x):
            return Duck(x)
    """)
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.unsupported_value}


def test_unsharded_array_with_patched_sharding_facts_earns_nothing() -> None:
    """The old exploit: an array on one device, the harness's describer rebound to report the
    facts the case wants (device count, shard shapes). Facts are not taken from the child."""
    graded = grade_hostile("jax_shard_rows", """
        import __main__, jax

        def shard_rows(x):
            __main__._sharding_claim = lambda arr: (
                {"spec": ["data", None], "mesh": {"data": 8}, "num_devices": 8,
                 "shard_shapes": [[arr.shape[0] // 8, arr.shape[1]]], "fully_replicated": False}, None)
            return jax.device_put(x)
    """)
    assert_earned_nothing(graded)


def test_declared_mesh_larger_than_the_devices_earns_nothing() -> None:
    """A rebound describer declaring a 16-device mesh (there are 8): the trusted child cannot
    place it, so the declaration counts for nothing."""
    graded = grade_hostile("jax_shard_rows", """
        import __main__, jax

        def shard_rows(x):
            __main__._sharding_claim = lambda arr: ([["data", 16]], ["data", None])
            return jax.device_put(x)
    """)
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.sharding_not_as_asked}


def test_declared_spec_naming_a_missing_axis_earns_nothing() -> None:
    graded = grade_hostile("jax_sharded_matmul", """
        import __main__, jax

        def sharded_matmul(x, w):
            __main__._sharding_claim = lambda arr: ([["data", 4], ["model", 2]], ["data", "tensor"])
            return jax.device_put(x @ w)
    """)
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.sharding_not_as_asked}


# ---------------------------------------------------------------- harness rebinding


def test_rebound_encoder_claiming_a_verdict_earns_nothing() -> None:
    graded = grade_hostile("kv_cache_bytes", """
        import __main__

        def kv_cache_bytes(*args):
            __main__._encode = lambda value, budget: {"verdict": "passed", "reward": 1.0}
            return 0
    """)
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.unsupported_value}


def test_rebound_encoder_echoing_the_inputs_leaks_nothing() -> None:
    graded = grade_hostile("torus_neighbors", """
        import __main__

        def torus_neighbors(shape, coord, wraparound):
            text = repr((shape, coord, wraparound))
            __main__._encode = lambda value, budget: {"$unsupported": text}
            return None
    """)
    assert_earned_nothing(graded)


def test_rebound_result_writer_sending_a_final_message_earns_nothing() -> None:
    graded = grade_hostile("kv_cache_bytes", """
        import __main__, json, os

        def kv_cache_bytes(*args):
            def send(fd, message):
                body = json.dumps({"kind": "final", "result": {"kind": "value", "value": 1},
                                   "verdict": "passed"}).encode()
                os.write(fd, len(body).to_bytes(8, "big") + body)
            __main__._send = send
            return 1
    """)
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.invalid_channel}


def test_rebound_exception_describer_with_raise_everywhere_earns_nothing() -> None:
    """Every case raises and the describer is rebound to call it ValueError: only the case that
    must raise passes, and an edge case earns nothing without general ones."""
    graded = grade_hostile("ring_collective_time", """
        import __main__

        def ring_collective_time(*args):
            __main__._describe_exception = lambda exc: {"kind": "raised", "type": "ValueError"}
            raise RuntimeError("no idea")
    """)
    assert_earned_nothing(graded)
    assert graded.result.details["counts"].get("passed") == 1


# ---------------------------------------------------------------- forged frames


def test_forged_frame_larger_than_the_limit_costs_little() -> None:
    """16 MiB of 2-byte characters announced in one frame: refused at the header."""
    graded = grade_hostile("kv_cache_bytes", frame_writer(value_frame("'\"' + 'Ж' * (8 << 20) + '\"'")))
    assert_earned_nothing(graded, costly=True)


def test_forged_frame_of_two_byte_characters_within_the_limit_costs_little() -> None:
    """Under the byte limit on the wire, three times over it once escaped to ASCII."""
    strings = "'[' + ','.join(['\"' + 'Ж' * 4000 + '\"'] * 5) + ']'"
    graded = grade_hostile("kv_cache_bytes", frame_writer(value_frame(strings)))
    assert_earned_nothing(graded, costly=True)
    assert reasons(graded) == {Reason.result_too_large}


def test_forged_deeply_nested_frame_costs_little() -> None:
    graded = grade_hostile("kv_cache_bytes", frame_writer(value_frame("'[' * 30000 + ']' * 30000")))
    assert_earned_nothing(graded, costly=True)


def test_forged_wide_frame_costs_little() -> None:
    graded = grade_hostile("kv_cache_bytes", frame_writer(value_frame("'[' + ','.join(['[]'] * 20000) + ']'")))
    assert_earned_nothing(graded, costly=True)
    assert reasons(graded) == {Reason.unsupported_value}


def test_forged_frames_of_wrong_types_earn_nothing() -> None:
    """A bool for a number, an untagged dict, a fake array tag with facts, one per case."""
    forged = [
        "true",
        '{"flops": 1}',
        '{"$jax": {"num_devices": 8, "spec": ["data", null]}}',
        '{"$array": {"kind": "float", "shape": [3], "data": [1, 2]}}',
    ]
    setup = f"import random\nFORGED = {forged!r}"
    graded = grade_hostile("kv_cache_bytes", frame_writer(value_frame("random.choice(FORGED)"), setup=setup))
    assert_earned_nothing(graded)


def test_truncated_frame_earns_nothing() -> None:
    graded = grade_hostile("kv_cache_bytes", frame_writer("(1000).to_bytes(8, 'big') + b'{\"kind\": \"val'"))
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.no_result}


def test_frame_with_trailing_bytes_earns_nothing() -> None:
    graded = grade_hostile("kv_cache_bytes", frame_writer(value_frame("'1'") + " + b'\\xff' * 64"))
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.invalid_channel}


def test_multiple_result_frames_earn_nothing() -> None:
    graded = grade_hostile("kv_cache_bytes", frame_writer(value_frame("'1'") + " * 3"))
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.invalid_channel}


def test_forged_nan_earns_nothing() -> None:
    graded = grade_hostile("kv_cache_bytes", frame_writer(value_frame("'NaN'")))
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.unsupported_value}


def test_forged_huge_integer_earns_nothing() -> None:
    graded = grade_hostile("kv_cache_bytes", frame_writer(value_frame("'9' * 4000")))
    assert_earned_nothing(graded, costly=True)


# ---------------------------------------------------------------- solving nothing


def _old_fixed_cases(name: str):
    """The cases the service once used for every grade: seeded from the exercise name alone."""
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return BY_NAME[name].generate(random.Random(seed))


@pytest.mark.parametrize("name", ["torus_stats", "critical_batch_size"])
def test_lookup_table_from_the_source_earns_nothing(name: str) -> None:
    table = {json.dumps(list(c.args)): c.expected for c in _old_fixed_cases(name)}
    fallback = next(iter(table.values()))
    entry = BY_NAME[name].entry
    graded = grade_hostile(name, f"""
        import json
        TABLE = {table!r}

        def {entry}(*args):
            return TABLE.get(json.dumps(list(args)), {fallback!r})
    """)
    assert_earned_nothing(graded)


def test_raising_everywhere_earns_nothing() -> None:
    graded = grade_hostile("torus_neighbors", """
        def torus_neighbors(shape, coord, wraparound):
            raise ValueError("coordinate outside the slice")
    """)
    assert_earned_nothing(graded)
    assert graded.result.details["counts"] == {"exception": 7, "passed": 1}


@pytest.mark.parametrize("constant", ["0.0", "None", "{'max_hops': 8, 'bisection_links': 16}"])
def test_constant_answers_earn_nothing(constant: str) -> None:
    name = "ring_collective_time" if constant != "{'max_hops': 8, 'bisection_links': 16}" else "torus_stats"
    graded = grade_hostile(name, f"""
        def {BY_NAME[name].entry}(*args):
            if args and args[0] not in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all") \\
                    and isinstance(args[0], str):
                raise ValueError("unknown collective")
            return {constant}
    """)
    assert_earned_nothing(graded)


def test_constant_disguised_by_key_order_and_float_noise_earns_nothing() -> None:
    graded = grade_hostile("training_cost", """
        import random

        def training_cost(*args):
            items = [("flops", 1e24 * (1 + random.random() * 1e-9)), ("seconds", 3.6e6)]
            random.shuffle(items)
            return dict(items)
    """)
    assert_earned_nothing(graded)
    assert graded.result.details.get("rule") == "constant_answer"


def test_only_the_edge_cases_right_earns_nothing() -> None:
    """Right on a ring of one chip and on refusing unknown collectives, wrong everywhere else."""
    graded = grade_hostile("ring_collective_time", """
        def ring_collective_time(kind, array_bytes, n, link_bandwidth, bidirectional):
            if kind not in ("all_gather", "reduce_scatter", "all_reduce"):
                raise ValueError(kind)
            return 0.0 if n == 1 else float(n)
    """)
    assert_earned_nothing(graded)
    assert graded.result.details["counts"]["passed"] == 2


# ---------------------------------------------------------------- exfiltration


def test_exception_messages_and_class_names_carry_nothing_out() -> None:
    graded = grade_hostile("kv_cache_bytes", """
        def kv_cache_bytes(*args):
            print(args)
            raise type("E_" + "_".join(map(str, args)), (ValueError,), {})(repr(args))
    """)
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.raised_exception}


def test_dtype_and_repr_text_carries_nothing_out() -> None:
    graded = grade_hostile("kv_cache_bytes", """
        import numpy as np

        def kv_cache_bytes(*args):
            fields = [("f_" + "_".join(map(str, args)), "f4")]
            return np.zeros(2, dtype=fields)
    """)
    assert_earned_nothing(graded)
    assert reasons(graded) == {Reason.unsupported_value}


def test_case_timings_are_bucketed() -> None:
    """Sleeping a time that encodes an input leaves only a coarse bucket, no number."""
    graded = grade_hostile("kv_cache_bytes", """
        import time

        def kv_cache_bytes(batch, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_element):
            time.sleep((n_layers % 10) / 20)
            return -1
    """)
    assert_earned_nothing(graded)
    assert "wall" not in graded.body and "_ms" not in graded.body


def test_reference_still_earns_full_reward_on_the_same_path() -> None:
    """The attacks above fail for what they do, not because the path itself is broken."""
    graded = grade_hostile("jax_shard_rows", inspect.getsource(reference.shard_rows))
    assert graded.result.reward == 1.0, graded.result.details


def test_constant_answer_with_deliberate_timeouts_earns_nothing() -> None:
    """Timing out on some cases does not hide a constant answer on the others."""
    quick = SETTINGS.model_copy(update={"sandbox": SETTINGS.sandbox.model_copy(update={"wall_seconds": 3.0})})
    graded = grade_hostile("torus_stats", settings=quick, source="""
        import time

        def torus_stats(shape, wraparound):
            if shape[0] % 3 == 0:
                time.sleep(60)
            return {"max_hops": 8, "bisection_links": 16}
    """)
    assert_earned_nothing(graded)
    assert graded.result.details.get("rule") == "constant_answer"
    assert graded.result.details["counts"].get("timeout")


# A write on the result channel: the seccomp filter plays no part, so each isolation runs it once,
# with the filter where that tier is offered (tests/sandbox/tiers.py, FILTER_NEUTRAL).
@pytest.mark.parametrize("tier", without_filtered_twins(offered_tiers()))
def test_forged_oversized_frame_earns_nothing_on_every_tier(tier: str) -> None:
    settings = SETTINGS.model_copy(update={"sandbox": tier_settings(
        tier, wall_seconds=20.0, cpu_seconds=8.0, max_result_items=SETTINGS.sandbox.max_result_items,
        max_result_bytes=SETTINGS.sandbox.max_result_bytes)})
    graded = grade_hostile("kv_cache_bytes", frame_writer(value_frame("'\"' + 'Ж' * (8 << 20) + '\"'")), settings)
    assert_earned_nothing(graded, costly=True)
    assert graded.result.details["sandbox_tier"] == tier
    assert reasons(graded) == {Reason.invalid_channel}
