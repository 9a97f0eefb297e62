"""The launcher's memo of kernel parameters (`LaunchMemo`, evt/templates/evt_launch.h) on the host:
a small program built by nvcc (host code only) inserts and looks up launch keys and prints what it
finds. A repeated launch key must find the parameters built for exactly that key, never another's;
past its ways the oldest entry goes; an entry never moves while it is kept."""

from __future__ import annotations

import pytest

from evt.codegen.nvcc import nvcc_path
from tests.test_functors_host import run_host_program

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found (PATH or $CUDA_HOME/bin)"),
]

PROGRAM = r"""
#include <cstdio>
#include "evt_launch.h"
using Key = std::array<int64_t, 3>;
struct Launch { int64_t value = -1; };
int main() {
  evt::launch::LaunchMemo<Launch, Key, 4> memo;
  auto show = [&](int64_t k) {
    Launch* hit = memo.find(Key{7, k, 2 * k});
    std::printf("%lld:%lld ", (long long)k, hit ? (long long)hit->value : -1LL);
  };
  Launch* first = nullptr;
  for (int64_t k = 0; k < 4; ++k) {
    Launch* at = memo.insert(Key{7, k, 2 * k}, Launch{100 + k});
    if (k == 0) first = at;
  }
  for (int64_t k = 0; k < 5; ++k) show(k);
  std::printf("| %lld |", (long long)(memo.find(Key{7, 0, 1}) != nullptr));  // one word differs
  std::printf(" %lld\n", (long long)(first == memo.find(Key{7, 0, 0})));  // still where it was
  memo.insert(Key{7, 4, 8}, Launch{104});  // a fifth key: the oldest (0) goes
  memo.insert(Key{7, 5, 10}, Launch{105});  // a sixth: then 1
  for (int64_t k = 0; k < 6; ++k) show(k);
  std::printf("\n");
}
"""


@pytest.fixture(scope="module")
def output(tmp_path_factory) -> list[str]:
    return run_host_program(tmp_path_factory.mktemp("memo"), PROGRAM).splitlines()


def test_a_key_finds_its_own_parameters_and_no_other(output):
    assert output[0] == "0:100 1:101 2:102 3:103 4:-1 | 0 | 1"


def test_the_oldest_entry_goes_past_the_ways(output):
    assert output[1] == "0:-1 1:-1 2:102 3:103 4:104 5:105 "
