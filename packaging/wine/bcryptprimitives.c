/*
 * A stand-in for Windows' bcryptprimitives.dll, for running our Windows build under Wine 8
 * (Debian 12), which lacks that DLL. Rust's standard library imports its ProcessPrng (present
 * on Windows 10 and later) to seed hash maps; without the DLL the program does not start.
 * packaging/test-windows.sh builds this into the test's own Wine prefix only; nothing of it
 * ships in a llamafile. ProcessPrng fills a buffer with random bytes and always succeeds;
 * here it asks the system RNG through bcrypt.dll, which Wine has.
 */
#include <windows.h>
#include <bcrypt.h>

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (BCryptGenRandom(NULL, data, chunk, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0)
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
