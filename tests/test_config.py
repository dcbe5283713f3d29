"""Settings: defaults, parsing, and errors that name the variable and the accepted values."""
import pytest

from hvlite import ConfigError
from hvlite.config import Settings, load


def test_defaults():
    s = load({})
    assert s == Settings()
    assert s.allreduce_algorithm == "auto" and s.mpi_thread_level == "multiple"


def test_coordinator_settings():
    s = load({"HVLITE_CYCLE_TIME": "0.5", "HVLITE_FUSION_THRESHOLD": "0", "HVLITE_CACHE_CAPACITY": "0",
              "HVLITE_STALL_CHECK_TIME_SECONDS": "5", "HVLITE_STALL_SHUTDOWN_TIME_SECONDS": "30",
              "HVLITE_FUSION_TENSOR_LIMIT": "1024"})
    assert (s.cycle_time_ms, s.fusion_threshold, s.cache_capacity, s.stall_check_seconds,
            s.stall_shutdown_seconds, s.fusion_tensor_limit) == (0.5, 0, 0, 5.0, 30.0, 1024)
    with pytest.raises(ConfigError, match="HVLITE_CYCLE_TIME"):
        load({"HVLITE_CYCLE_TIME": "-1"})
    with pytest.raises(ConfigError, match="HVLITE_FUSION_THRESHOLD"):
        load({"HVLITE_FUSION_THRESHOLD": "lots"})


def test_values_parse():
    s = load({"HVLITE_ALLREDUCE_ALGORITHM": "Ring", "HVLITE_MPI_THREAD_LEVEL": "serialized",
              "HVLITE_LOCAL_SIZE": "2", "HVLITE_SEGMENT_BYTES": "65536",
              "HVLITE_CHECK_AGREEMENT": "off", "HVLITE_ALPHA_INTRA": "1e-6"})
    assert (s.allreduce_algorithm, s.mpi_thread_level, s.local_size, s.segment_bytes,
            s.check_agreement, s.alpha_intra) == ("ring", "serialized", 2, 65536, False, 1e-6)


@pytest.mark.parametrize("var,value,fragment", [
    ("HVLITE_ALLREDUCE_ALGORITHM", "butterfly", "ring, rhd, tree"),
    ("HVLITE_MPI_THREAD_LEVEL", "many", "serialized"),
    ("HVLITE_LOCAL_SIZE", "two", "integer"),
    ("HVLITE_LOCAL_SIZE", "-1", "out of range"),
    ("HVLITE_SEGMENT_BYTES", "12", "out of range"),
    ("HVLITE_CHECK_AGREEMENT", "maybe", "boolean"),
    ("HVLITE_SHM_DIRECT", "often", "boolean"),
    ("HVLITE_GAMMA", "0", "positive"),
])
def test_bad_values_name_the_variable(var, value, fragment):
    with pytest.raises(ConfigError) as info:
        load({var: value})
    assert var in str(info.value) and repr(value) in str(info.value) and fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_horovod_aliases_and_precedence():
    s = load({"HOROVOD_FUSION_THRESHOLD": "1024", "HOROVOD_CYCLE_TIME": "3",
              "HOROVOD_TIMELINE": "t.json", "HOROVOD_STALL_CHECK_DISABLE": "1"})
    assert (s.fusion_threshold, s.cycle_time_ms, s.timeline, s.stall_check_seconds) == (1024, 3.0, "t.json", 0.0)
    assert load({"HOROVOD_FUSION_THRESHOLD": "1024", "HVLITE_FUSION_THRESHOLD": "7"}).fusion_threshold == 7
    with pytest.raises(ConfigError, match="HOROVOD_CACHE_CAPACITY='many'"):
        load({"HOROVOD_CACHE_CAPACITY": "many"})


def test_autotune_and_probe_settings():
    s = load({"HVLITE_AUTOTUNE": "1", "HVLITE_AUTOTUNE_LOG": "a.csv", "HVLITE_PROBE": "0",
              "HVLITE_LOG_LEVEL": "debug"})
    assert (s.autotune, s.autotune_log, s.probe, s.log_level) == (True, "a.csv", False, "debug")
    with pytest.raises(ConfigError, match="HVLITE_LOG_LEVEL"):
        load({"HVLITE_LOG_LEVEL": "loud"})


def test_dynamic_process_sets_setting():
    assert load({}).dynamic_process_sets is False
    assert load({"HVLITE_DYNAMIC_PROCESS_SETS": "1"}).dynamic_process_sets is True
    assert load({"HOROVOD_DYNAMIC_PROCESS_SETS": "1"}).dynamic_process_sets is True
    assert load({"HOROVOD_DYNAMIC_PROCESS_SETS": "1",
                 "HVLITE_DYNAMIC_PROCESS_SETS": "0"}).dynamic_process_sets is False
    with pytest.raises(ConfigError, match="HOROVOD_DYNAMIC_PROCESS_SETS"):
        load({"HOROVOD_DYNAMIC_PROCESS_SETS": "maybe"})


def test_cuda_settings():
    assert (load({}).cuda_aware, load({}).cuda_chunk_bytes) == ("auto", 4 << 20)
    for raw, want in (("1", "1"), ("0", "0"), ("on", "1"), ("False", "0"), ("AUTO", "auto")):
        assert load({"HVLITE_CUDA_AWARE": raw}).cuda_aware == want
    assert load({"HVLITE_CUDA_CHUNK_BYTES": "65536"}).cuda_chunk_bytes == 65536
    with pytest.raises(ConfigError, match="HVLITE_CUDA_AWARE='maybe'.*auto, 1/0"):
        load({"HVLITE_CUDA_AWARE": "maybe"})
    with pytest.raises(ConfigError, match="HVLITE_CUDA_CHUNK_BYTES"):
        load({"HVLITE_CUDA_CHUNK_BYTES": "100"})


def test_shm_settings():
    s = load({"HVLITE_ALLREDUCE_ALGORITHM": "shm", "HVLITE_SHM": "0",
              "HVLITE_SHM_SEGMENT_BYTES": "65536", "HVLITE_SHM_REDUNDANT_BYTES": "0",
              "HVLITE_ALPHA_SHM": "2e-7", "HVLITE_BETA_MEM": "1e-10"})
    assert (s.allreduce_algorithm, s.shm, s.shm_segment_bytes, s.shm_redundant_bytes) == \
        ("shm", False, 65536, 0)
    assert s.context_args() == (False, 65536, 0, True, 1, True, True)
    assert load({"HVLITE_SHM_DIRECT": "0"}).context_args()[5] is False
    assert load({"HVLITE_SHM_PTRACER": "0"}).context_args()[6] is False
    assert load({"HVLITE_CALIBRATE": "0"}).context_args()[4] == 0
    assert load({"HVLITE_LOG_LEVEL": "debug"}).context_args()[4] == 2
    with pytest.raises(ConfigError, match="HVLITE_CALIBRATE.*boolean"):
        load({"HVLITE_CALIBRATE": "sometimes"})
    assert s.cost_model()["alpha_shm"] == 2e-7 and s.cost_model()["beta_mem"] == 1e-10
    assert load({}).shm_redundant_bytes == -1          # by node size, at init
    with pytest.raises(ConfigError, match="HVLITE_SHM_SEGMENT_BYTES.*out of range"):
        load({"HVLITE_SHM_SEGMENT_BYTES": "100"})
    with pytest.raises(ConfigError, match="HVLITE_SHM.*boolean"):
        load({"HVLITE_SHM": "sometimes"})


def test_every_setting_is_classified_as_per_rank_or_agreed():
    """A new field must be put on one side: either every rank must share it (init() compares it)
    or it may differ per rank."""
    import dataclasses
    from hvlite.config import AGREED, PER_RANK
    names = {f.name for f in dataclasses.fields(Settings)}
    assert PER_RANK <= names and AGREED <= names and not PER_RANK & AGREED
    assert PER_RANK | AGREED == names
    for must in ("segment_bytes", "fusion_threshold", "fusion_tensor_limit", "cache_capacity",
                 "probe", "shm", "shm_segment_bytes", "shm_redundant_bytes", "mpi_thread_level",
                 "allreduce_algorithm", "local_size", "check_agreement", "dynamic_process_sets"):
        assert must in AGREED, must
    for free in ("timeline", "timeline_all_ranks", "log_level", "autotune_log"):
        assert free in PER_RANK, free


def test_agreed_values_and_disagreement_messages():
    from hvlite.config import agreed_values, disagreements
    a = agreed_values(load({}))
    b = agreed_values(load({"HVLITE_SEGMENT_BYTES": "4096", "HVLITE_LOG_LEVEL": "debug"}))
    assert "HVLITE_LOG_LEVEL" not in a and a["HVLITE_SEGMENT_BYTES"] == 262144
    assert disagreements([a, a, a]) == []
    msgs = disagreements([a, b, a])
    assert msgs == ["HVLITE_SEGMENT_BYTES: rank 0: 262144, rank 1: 4096, rank 2: 262144"]
    many = disagreements([a] * 10 + [b])
    assert len(many) == 1 and "3 more ranks" in many[0]


@pytest.mark.parametrize("var", ["HVLITE_CYCLE_TIME", "HVLITE_STALL_CHECK_TIME_SECONDS",
                                 "HVLITE_STALL_SHUTDOWN_TIME_SECONDS", "HVLITE_PS_TIMEOUT",
                                 "HVLITE_GAMMA", "HOROVOD_CYCLE_TIME"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e300"])
def test_numbers_must_be_finite(var, value):
    with pytest.raises(ConfigError) as info:
        load({var: value})
    assert var in str(info.value) and "finite" in str(info.value)


def test_unknown_variables_are_named_with_the_closest_known_one():
    from hvlite.config import unknown_variables
    env = {"HVLITE_SEGMENT_BYTE": "1", "HOROVOD_FUSION_THRESHOLDS": "1", "HVLITE_QQQQQQQQQQQQQQQQ": "1",
           "HVLITE_SEGMENT_BYTES": "4096", "HOROVOD_CYCLE_TIME": "1", "HVLITE_MPIEXEC": "x",
           "HVLITE_BUILD_JOBS": "2", "HVLITE_SANITIZE": "1", "HVLITE_TEST_DROPS": "5",
           "HOROVOD_STALL_CHECK_DISABLE": "1", "PATH": "/bin"}
    assert unknown_variables(env) == [("HOROVOD_FUSION_THRESHOLDS", "HOROVOD_FUSION_THRESHOLD"),
                                      ("HVLITE_QQQQQQQQQQQQQQQQ", None),
                                      ("HVLITE_SEGMENT_BYTE", "HVLITE_SEGMENT_BYTES")]


def test_horovods_own_variables_that_mean_nothing_here_say_why():
    from hvlite.config import ignored_horovod_variables, unknown_variables
    env = {"HOROVOD_GPU_OPERATIONS": "NCCL", "HOROVOD_CPU_OPERATIONS": "gloo",
           "HOROVOD_FUSION_THRESHOLDS": "1"}
    assert [n for n, _ in unknown_variables(env)] == ["HOROVOD_FUSION_THRESHOLDS"]
    why = dict(ignored_horovod_variables(env))
    assert sorted(why) == ["HOROVOD_CPU_OPERATIONS", "HOROVOD_GPU_OPERATIONS"]
    assert "device path" in why["HOROVOD_GPU_OPERATIONS"] and "Gloo" in why["HOROVOD_CPU_OPERATIONS"]
