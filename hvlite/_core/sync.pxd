# sync.h for Cython: clock, sleep, backoff, atomics and a mutex/condition pair (C and C++ modules).
cdef extern from "sync.h" nogil:
    double hv_now()
    void hv_sleep(double)
    void hv_yield()
    void hv_pause()
    int hv_load(int*)
    void hv_store(int*, int)
    int hv_add(int*, int)
    int hv_load_sc(int*)
    void hv_store_sc(int*, int)
    void hv_fence()
    int hv_futex_wait(int*, int, double)
    void hv_futex_wake(int*)
    long long hv_load64(volatile long long* p)
    void hv_store64(volatile long long* p, long long v)
    ctypedef struct hv_backoff:
        pass
    void hv_backoff_init(hv_backoff*)
    double hv_backoff_step(hv_backoff*)
    ctypedef struct hv_monitor:
        pass
    void hv_monitor_init(hv_monitor*)
    void hv_monitor_destroy(hv_monitor*)
    void hv_lock(hv_monitor*)
    void hv_unlock(hv_monitor*)
    bint hv_trylock(hv_monitor*)
    void hv_notify_all(hv_monitor*)
    void hv_wait(hv_monitor*, double)
