"""LRUAllocator's cache of freed blocks: bounded by PLUGRAD_ALLOC_CACHE (a share of the device's
memory or bytes), least recently freed blocks given back first, and emptied when memory runs out."""
import pytest

from plugrad import CONTRACT_VERSION, DeviceDecl, LRUAllocator, hookimpl
from plugrad.config import DEFAULT_ALLOC_CACHE, Config, MemoryBound
from plugrad.registry import Registry
from plugrad.builtins.python_device import PythonDevicePlugin


class Pool:
  """Device memory of `capacity` bytes, shared by the allocators made on it."""
  def __init__(self, capacity: int):
    self.capacity, self.used = capacity, 0


class PoolAllocator(LRUAllocator):
  """Blocks are labelled objects drawn from a Pool; allocating past its capacity is a MemoryError."""
  def __init__(self, pool: Pool, cache_limit=None):
    self.pool, self.freed = pool, []
    super().__init__(cache_limit)

  def _alloc(self, nbytes, options):
    if self.pool.used + nbytes > self.pool.capacity: raise MemoryError(f"out of pool memory allocating {nbytes} bytes")
    self.pool.used += nbytes
    return object()

  def _free(self, raw, nbytes, options):
    self.pool.used -= nbytes
    self.freed.append(raw)

  def _memory_total(self) -> int: return self.pool.capacity


def test_default_bound_is_a_share_of_the_device():
  assert DEFAULT_ALLOC_CACHE == MemoryBound(share=0.02)
  assert PoolAllocator(Pool(1000)).cache_limit == 20
  assert PoolAllocator(Pool(1000), cache_limit=300).cache_limit == 300
  assert PoolAllocator(Pool(1000), cache_limit=MemoryBound(share=0.5)).cache_limit == 500


def test_device_size_is_asked_only_when_needed():
  # a subclass sets up its device after LRUAllocator.__init__: the share must not be resolved there
  class Late(PoolAllocator):
    def __init__(self):
      LRUAllocator.__init__(self)
      self.pool, self.freed = Pool(1000), []
  a = Late()
  a.set_cache_limit(MemoryBound(share=0.1))
  a.free(a.alloc(50), 50)
  assert a.cache_limit == 100 and a.cached_bytes == 50


def test_freed_blocks_are_reused_within_the_bound():
  a = PoolAllocator(Pool(1000), cache_limit=100)
  x = a.alloc(40)
  a.free(x, 40)
  assert a.cached_bytes == 40 and a.alloc(40) is x and a.stats.cache_hits == 1 and a.cached_bytes == 0


def test_least_recently_freed_go_back_first():
  a = PoolAllocator(Pool(1000), cache_limit=100)
  blocks = {n: a.alloc(n) for n in (30, 40, 50)}
  for n in (30, 40, 50): a.free(blocks[n], n)  # 120 bytes freed into a 100-byte cache
  assert a.freed == [blocks[30]] and a.cached_bytes == 90 and a.pool.used == 90
  big = a.alloc(200)
  a.free(big, 200)  # bigger than the whole cache: straight back to the device
  assert a.freed[-1] is big and a.cached_bytes == 90


def test_lowering_the_bound_trims_the_cache():
  a = PoolAllocator(Pool(1000), cache_limit=100)
  for n in (10, 20, 30): a.free(a.alloc(n), n)
  a.set_cache_limit(0)
  assert a.cached_bytes == 0 and a.pool.used == 0 and not a.cache


def test_failed_allocation_empties_the_cache_and_retries():
  a = PoolAllocator(Pool(100), cache_limit=100)
  for n in (30, 40): a.free(a.alloc(n), n)  # 70 bytes of the device's 100 sit in the cache
  block = a.alloc(60)
  assert block is not None and a.cached_bytes == 0 and a.pool.used == 60


def test_failed_allocation_empties_other_allocators_caches():
  pool = Pool(100)  # host memory, say, shared by two devices
  first, second = PoolAllocator(pool, cache_limit=100), PoolAllocator(pool, cache_limit=100)
  first.free(first.alloc(80), 80)
  assert second.alloc(50) is not None and first.cached_bytes == 0


def test_memory_error_after_emptying_says_what_is_live():
  a = PoolAllocator(Pool(100), cache_limit=100)
  keep = a.alloc(90)  # noqa: F841 (live)
  with pytest.raises(MemoryError, match="out of pool memory") as e: a.alloc(20)
  assert any("90 bytes are held by live buffers" in note for note in e.value.__notes__)


@pytest.mark.parametrize("raw, bound", [
  ("", DEFAULT_ALLOC_CACHE), ("5%", MemoryBound(share=0.05)), ("0.25", MemoryBound(share=0.25)),
  ("512M", MemoryBound(nbytes=512 << 20)), ("2GiB", MemoryBound(nbytes=2 << 30)), ("4096", MemoryBound(nbytes=4096)),
  ("0", MemoryBound(nbytes=0)),
])
def test_env_option(raw, bound):
  assert Config.from_env({"PLUGRAD_ALLOC_CACHE": raw}).alloc_cache == bound


@pytest.mark.parametrize("raw", ["lots", "150%", "-1", "1.5", "2X"])
def test_env_option_errors_say_the_forms(raw):
  with pytest.raises(ValueError, match=r"PLUGRAD_ALLOC_CACHE=.*share of memory \(0.05 or 5%\) or a size in bytes"):
    Config.from_env({"PLUGRAD_ALLOC_CACHE": raw})


def test_registry_applies_the_option_to_a_device_allocator():
  pool = Pool(1 << 20)

  class PoolDevice:
    PLUGRAD_CONTRACT = CONTRACT_VERSION
    @hookimpl
    def plugrad_declare_devices(self, config): return [DeviceDecl("POOL", 10, lambda: None)]
    @hookimpl
    def plugrad_allocator(self, device, config): return PoolAllocator(pool) if device.startswith("POOL") else None

  for raw, limit in [("", (1 << 20) // 50), ("25%", 1 << 18), ("1K", 1024)]:
    reg = Registry(Config.from_env({"PLUGRAD_ALLOC_CACHE": raw}), builtins=[PythonDevicePlugin(), PoolDevice()],
                   entry_points=lambda group: [])
    assert reg.device("POOL").allocator.cache_limit == limit
