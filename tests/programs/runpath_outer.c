/* A library that dlopens another by its bare name, found through its own
   RUNPATH ($ORIGIN/inner): built by tests/test_inprocess_memory.py, which
   checks that the redirected dlopen still searches the caller's RUNPATH
   (the dynamic linker would search the shim's). */
#include <dlfcn.h>
#include <stddef.h>

/* dlopen libinner.so and call its grab(); returns the block or NULL. */
void *load_inner_and_grab(size_t n)
{
    void *h = dlopen("libcalipers_test_inner.so", RTLD_NOW);
    if (!h)
        return NULL;
    void *(*grab)(size_t) = (void *(*)(size_t))dlsym(h, "grab");
    return grab ? grab(n) : NULL;
}
