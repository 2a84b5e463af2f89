// Symbol visibility of libejk. The library is built with hidden visibility and a version script
// (cmake/EjkVisibility.cmake): only declarations marked EJK_API (the public C++ API and the C ABI)
// are exported, so that loading libejk into a process that carries its own copies of the C++
// runtime's templates, fmt or LLVM (PyTorch, jaxlib) binds nothing of ours to theirs.
#pragma once

#if defined(_WIN32)
#define EJK_API
#else
#define EJK_API __attribute__((visibility("default")))
#endif
