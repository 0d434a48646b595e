//! Hash functions. Expected digests come from Python's `hashlib`, the `hash_code` values from
//! Java's `String.hashCode()` (`"Hello".hashCode()` is 69609650).

use super::*;

#[test]
fn digests_are_lower_case_hex_of_the_utf8_bytes() {
    assert_eq!(
        strs("MD5(s)"),
        some_strs(&[
            Some("8b1a9953c4611296a827abf8c47804d7"),
            Some("8a223f8cb0e9065ff43b328b97e8467e"),
            None,
            Some("ff65a08b378189d94bfd3f019d2821eb"),
        ])
    );
    assert_eq!(
        strs("md5('hello world')")[0].as_deref(),
        Some("5eb63bbbe01eeed093cb22bb8f5acdc3")
    );
    assert_eq!(
        strs("sha1('hello world')")[0].as_deref(),
        Some("2aae6c35c94fcfb415dbe95f408b9ce91ee846ed")
    );
    assert_eq!(
        strs("SHA256('hello world')")[0].as_deref(),
        Some("b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9")
    );
    assert_eq!(
        strs("sha224('')")[0].as_deref(),
        Some("d14a028c2a3a2bc9476102bb288234c415a2b01f828ea62ac5b3e42f")
    );
    assert_eq!(
        strs("sha384('Hello')")[0].as_deref(),
        Some(
            "3519fe5ad2c596efe3e276a6f351b8fc0b03db861782490d45f7598ebd0ab5fd5520ed102f38c4a5ec834e98668035fc"
        )
    );
    assert_eq!(
        strs("sha512('wörld')")[0].as_deref(),
        Some(
            "be8b22aa86d36907bd4666bfae600d6bc5d13d7671b84c946317529fbf9685d9d38c2bfc19481f6eb18b18acdb89394af3b1ee9101b40f2ac96c3764a2cb7c20"
        )
    );
    assert_eq!(strs("sha256(s)")[2], None);
}

#[test]
fn sha2_picks_the_digest_by_bit_length() {
    assert_eq!(
        strs("sha2('hello world', 256)"),
        strs("sha256('hello world')")
    );
    assert_eq!(strs("sha2(s, 512)"), strs("sha512(s)"));
    assert_eq!(strs("sha2(s, NULL)"), [None, None, None, None]);
    let message = compile_error("sha2(s, 100)").to_string();
    assert!(message.contains("224, 256, 384 or 512"), "{message}");
}

#[test]
fn hash_code_is_javas_string_hash_code() {
    assert_eq!(
        ints("hash_code(s)"),
        [
            Some(69_609_650),
            Some(117_340_587),
            None,
            Some(-642_099_245)
        ]
    );
    assert_eq!(ints("HASH_CODE('hello world')")[0], Some(1_794_106_052));
    assert_eq!(ints("hash_code('')")[0], Some(0));
    // Outside the basic plane, Java hashes the two UTF-16 surrogates.
    assert_eq!(ints("hash_code('a😀')")[0], Some(1_866_116));
}
