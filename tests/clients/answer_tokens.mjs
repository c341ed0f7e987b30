// The length of the tests' long answers. A sanitized build (ASan or TSan; tests/clients/
// CMakeLists.txt sets SLUICE_SANITIZED=1 there) serves 25 to 45 times slower than release (the
// bounded-load burst of router.test.mjs: 0.8 s in release, 21 s under ASan, 35 s under TSan on
// a 2-core Zen 4), so a quarter of the tokens still keeps each request in flight longer than
// release does with all of them, for a quarter of the CI time.
export const answerTokens = (n) => (process.env.SLUICE_SANITIZED === "1" ? Math.ceil(n / 4) : n);
