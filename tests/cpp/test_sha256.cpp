#include <catch2/catch.hpp>

#include <string>

#include "sha256.h"

using mamba3_jit::Sha256;
using mamba3_jit::sha256_hex;

TEST_CASE("sha256 matches the FIPS 180-4 test vectors", "[sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                   "klmnopqrlmnopqrsmnopqrstnopqrstu") ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 gives the same digest however the input is split", "[sha256]") {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 7 + 3);
  const std::string whole = sha256_hex(data);
  // Splits around the 55/56/64-byte padding boundaries included.
  for (std::size_t step : {1u, 3u, 55u, 56u, 63u, 64u, 65u, 127u}) {
    Sha256 h;
    for (std::size_t i = 0; i < data.size(); i += step) h.update(data.substr(i, step));
    CHECK(h.hex_digest() == whole);
  }
  for (std::size_t n : {55u, 56u, 57u, 63u, 64u, 119u, 120u}) {
    Sha256 a, b;
    a.update(data.substr(0, n));
    b.update(data.data(), n / 2);
    b.update(data.data() + n / 2, n - n / 2);
    CHECK(a.hex_digest() == b.hex_digest());
  }
}
