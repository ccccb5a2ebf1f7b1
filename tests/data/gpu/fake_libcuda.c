/* A stand-in for the NVIDIA driver library (libcuda.so.1) for tests/gpu.rs, built there with cc.
 * Behaviour from the environment: FAKE_CUDA_INIT=N makes cuInit return N; FAKE_CUDA_JIT=fail
 * makes cuModuleLoadDataEx fail with a log; FAKE_CUDA_DEVICES=N devices (default 1).
 * FAKE_CUDA_LOG=PATH appends one line per kernel launch ("grid X Y Z block X Y Z"); kernels do
 * nothing, and memory is zeroed host memory, so runs complete with meaningless numbers.
 * Built with -DONLY_INIT it exports cuInit alone (a driver missing symbols).
 * cuModuleLoadDataEx accepts only NUL-terminated PTX text for sm_75, as the real JIT would. */
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <stdio.h>

typedef int CUresult;

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

CUresult cuInit(unsigned flags) { return flags ? 1 : env_int("FAKE_CUDA_INIT", 0); }

#ifndef ONLY_INIT
CUresult cuDriverGetVersion(int *v) { *v = 12080; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) {
    switch (e) {
    case 35: *s = "CUDA_ERROR_INSUFFICIENT_DRIVER"; return 0;
    case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
    case 218: *s = "CUDA_ERROR_INVALID_PTX"; return 0;
    case 999: *s = "CUDA_ERROR_UNKNOWN"; return 0;
    default: return 1;
    }
}
CUresult cuDeviceGetCount(int *n) { *n = env_int("FAKE_CUDA_DEVICES", 1); return 0; }
CUresult cuDeviceGet(int *d, int i) { *d = i; return 0; }
CUresult cuDeviceGetName(char *name, int len, int d) {
    (void)d;
    strncpy(name, "Fake GPU 24GB", (size_t)len);
    return 0;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
    (void)d;
    *v = attr == 75 ? 8 : attr == 76 ? 6 : 0;
    return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = (size_t)24 << 30; return 0; }
static int ctx_token;
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = &ctx_token; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
CUresult cuCtxSetCurrent(void *c) { (void)c; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
static int module_token;
CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *opts, void **vals) {
    char *log = NULL;
    size_t log_size = 0;
    for (unsigned i = 0; i < n; i++) {
        if (opts[i] == 5) log = (char *)vals[i];
        if (opts[i] == 6) log_size = (size_t)vals[i];
    }
    const char *text = (const char *)image;
    const char *msg = NULL;
    const char *jit = getenv("FAKE_CUDA_JIT");
    if (jit && strcmp(jit, "fail") == 0)
        msg = "ptxas fatal   : fake JIT failure";
    else if (!strstr(text, ".version") || !strstr(text, ".target sm_75"))
        msg = "not PTX for sm_75";
    if (msg) {
        if (log && log_size > strlen(msg)) strcpy(log, msg);
        return 218;
    }
    *m = &module_token;
    return 0;
}
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
    (void)m; (void)name;
    *f = &module_token;
    return 0;
}
CUresult cuModuleUnload(void *m) { (void)m; return 0; }
CUresult cuMemAlloc_v2(unsigned long long *p, size_t n) { *p = (unsigned long long)calloc(n ? n : 1, 1); return *p ? 0 : 2; }
CUresult cuMemFree_v2(unsigned long long p) { free((void *)p); return 0; }
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void *s, size_t n) { memcpy((void *)d, s, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *d, unsigned long long s, size_t n) { memcpy(d, (void *)s, n); return 0; }
CUresult cuMemcpyDtoD_v2(unsigned long long d, unsigned long long s, size_t n) { memcpy((void *)d, (void *)s, n); return 0; }
static int stream_token;
CUresult cuStreamCreate(void **s, unsigned flags) { (void)flags; *s = &stream_token; return 0; }
CUresult cuStreamDestroy_v2(void *s) { (void)s; return 0; }
CUresult cuStreamSynchronize(void *s) { (void)s; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    (void)f; (void)shared; (void)stream; (void)params; (void)extra;
    const char *path = getenv("FAKE_CUDA_LOG");
    if (path && *path) {
        FILE *log = fopen(path, "a");
        if (log) {
            fprintf(log, "grid %u %u %u block %u %u %u\n", gx, gy, gz, bx, by, bz);
            fclose(log);
        }
    }
    return 0;
}
#endif
