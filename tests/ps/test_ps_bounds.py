"""The parameter server's gather of byte strings sizes its buffer in Python integers: a total
past 2 GiB (where an int sum wrapped into an undersized buffer that the copy overflowed) and a
rank whose string is too long for MPI's int counts are refused, naming them."""
import pytest

from hvlite._core.ps import gather_layout

INT_MAX = 2 ** 31 - 1


def test_offsets_and_total():
    assert gather_layout([3, 0, 5]) == ([0, 3, 3], 8)
    assert gather_layout([]) == ([], 0)


def test_the_boundary_itself_is_allowed():
    assert gather_layout([INT_MAX - 1, 1]) == ([0, INT_MAX - 1], INT_MAX)


@pytest.mark.parametrize("lens", [[2 ** 30, 2 ** 30], [INT_MAX, 1], [INT_MAX] * 3])
def test_a_total_past_int_max_is_refused(lens):
    with pytest.raises(ValueError, match=f"add up to {sum(lens)} bytes"):
        gather_layout(lens)


def test_a_rank_that_said_too_long_is_named():
    with pytest.raises(ValueError, match=r"ranks \[1, 3\] have more than"):
        gather_layout([4, -1, 2, -1])
