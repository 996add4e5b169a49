// 128 random bits from the kernel (getrandom(2)) as 32 lowercase hex characters: session ids
// and the Redis store's lock tokens, which must be unguessable and never collide.
// Thread-safe.
#pragma once

#include <string>

namespace abcd {

std::string RandomHex128();

}  // namespace abcd
