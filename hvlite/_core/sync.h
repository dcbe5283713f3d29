/* Clock, sleep and a mutex/condition pair for the coordinator (monotonic clock throughout). */
#ifndef HVLITE_SYNC_H
#define HVLITE_SYNC_H
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <errno.h>
#ifdef __linux__
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static inline double hv_now(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void hv_sleep(double seconds) {
    struct timespec ts; ts.tv_sec = (time_t)seconds; ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

static inline void hv_yield(void) { sched_yield(); }

/* How a thread waits on MPI requests it polls: 64 quick tests, then yield the CPU for the first
 * 200 us, then sleep with a pause doubling from 10 us to 1 ms. Waiting on a late rank costs no
 * CPU, and runs with more ranks than cores stay fast. Returns the seconds waited so far. */
typedef struct { int tests; double t0, pause; } hv_backoff;
static inline void hv_backoff_init(hv_backoff* b) { b->tests = 0; b->t0 = hv_now(); b->pause = 10e-6; }
static inline double hv_backoff_step(hv_backoff* b) {
    if (++b->tests < 64) return 0.0;
    double waited = hv_now() - b->t0;
    if (waited < 200e-6) { sched_yield(); return waited; }
    hv_sleep(b->pause);
    b->pause = b->pause < 1e-3 ? b->pause * 2 : 1e-3;
    return waited;
}
static inline int hv_load(int* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void hv_store(int* p, int v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
/* 64-bit flags in memory shared between processes (the shm all-reduce's epochs). */
static inline long long hv_load64(volatile long long* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void hv_store64(volatile long long* p, long long v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline int hv_add(int* p, int v) { return __atomic_add_fetch(p, v, __ATOMIC_SEQ_CST); }
/* Sequentially consistent: with hv_add on the other side, two threads that each write one word
 * and then read the other's cannot both miss the other's write. */
static inline int hv_load_sc(int* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static inline void hv_store_sc(int* p, int v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static inline void hv_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
/* Sleep on a word in memory shared between processes until another process wakes it, while it
 * still holds `expected`, for at most `seconds`; returns 1 when woken (callers look again: the
 * word may not have moved), 0 when the word had moved already, the time ran out or a signal
 * came. Where there is no futex, a short sleep. */
static inline int hv_futex_wait(int* p, int expected, double seconds) {
#ifdef __linux__
    struct timespec ts; ts.tv_sec = (time_t)seconds; ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    return syscall(SYS_futex, p, FUTEX_WAIT, expected, &ts, NULL, 0) == 0;
#else
    (void)p; (void)expected; (void)seconds; hv_sleep(2e-5); return 0;
#endif
}
static inline void hv_futex_wake(int* p) {
#ifdef __linux__
    syscall(SYS_futex, p, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#else
    (void)p;
#endif
}
static inline void hv_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct { pthread_mutex_t mu; pthread_cond_t cv; } hv_monitor;

static inline void hv_monitor_init(hv_monitor* m) {
    pthread_condattr_t a; pthread_condattr_init(&a); pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_mutexattr_t ma; pthread_mutexattr_init(&ma);
#if defined(__GLIBC__) && defined(__USE_GNU)
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&m->mu, &ma); pthread_mutexattr_destroy(&ma);
    pthread_cond_init(&m->cv, &a); pthread_condattr_destroy(&a);
}
static inline void hv_monitor_destroy(hv_monitor* m) { pthread_cond_destroy(&m->cv); pthread_mutex_destroy(&m->mu); }
static inline void hv_lock(hv_monitor* m) { pthread_mutex_lock(&m->mu); }
static inline void hv_unlock(hv_monitor* m) { pthread_mutex_unlock(&m->mu); }
/* Take the lock only if it is free; returns whether it was taken. */
static inline int hv_trylock(hv_monitor* m) { return pthread_mutex_trylock(&m->mu) == 0; }
static inline void hv_notify_all(hv_monitor* m) { pthread_cond_broadcast(&m->cv); }
/* Wait (lock held) at most `seconds`; negative waits without a limit. */
static inline void hv_wait(hv_monitor* m, double seconds) {
    if (seconds < 0) { pthread_cond_wait(&m->cv, &m->mu); return; }
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + seconds;
    ts.tv_sec = (time_t)t; ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&m->cv, &m->mu, &ts);
}
#endif
