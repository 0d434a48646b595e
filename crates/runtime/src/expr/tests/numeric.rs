//! Flink's numeric functions. Expected values are the examples of Flink's "System (Built-in)
//! Functions" page where it has one, otherwise worked by hand or with Python's `math`.

use super::*;

/// The first row of a FLOAT expression.
fn float(sql: &str) -> f64 {
    floats(sql)[0].unwrap_or_else(|| panic!("`{sql}` is NULL"))
}

#[test]
fn truncate_cuts_toward_zero() {
    // Flink: "42.324.truncate(2) to 42.32. and 42.324.truncate() to 42.0".
    assert_eq!(float("truncate(42.324, 2)"), 42.32);
    assert_eq!(float("truncate(42.324)"), 42.0);
    assert_eq!(float("truncate(-42.329, 2)"), -42.32);
    assert_eq!(
        floats("truncate(f, 1)"),
        [Some(1.5), Some(-0.2), None, Some(2.0)]
    );
    // "integer2 can be negative to cause integer2 digits left of the decimal point of the
    // value to become zero".
    assert_eq!(float("truncate(1234.5, -2)"), 1200.0);
    assert_eq!(ints("truncate(i, -1)"), [Some(0), Some(0), None, Some(10)]);
    assert_eq!(ints("truncate(i)"), [Some(1), Some(-7), None, Some(10)]);
    // "Returns NULL if numeric1 or integer2 is NULL."
    assert_eq!(floats("truncate(f, NULL)"), [None; 4]);
}

#[test]
fn power_sqrt_exp_and_logarithms_are_floats() {
    assert_eq!(float("power(2, 10)"), 1024.0);
    assert_eq!(
        floats("POWER(i, 2)"),
        [Some(1.0), Some(49.0), None, Some(100.0)]
    );
    assert_eq!(float("sqrt(16)"), 4.0);
    assert_eq!(float("sqrt(2)"), std::f64::consts::SQRT_2);
    assert!(float("sqrt(-1)").is_nan(), "Java's Math.sqrt(-1) is NaN");
    assert_eq!(float("exp(0)"), 1.0);
    assert_eq!(float("exp(1)"), std::f64::consts::E);
    assert_eq!(float("ln(e())"), 1.0);
    assert_eq!(float("ln(0)"), f64::NEG_INFINITY);
    assert_eq!(float("log10(1000)"), 3.0);
    assert_eq!(float("log2(8)"), 3.0);
    // LOG(x) is the natural logarithm; LOG(b, x) the logarithm of x to the base b.
    assert_eq!(float("log(8)"), 2.0794415416798357);
    assert_eq!(float("log(2, 8)"), 3.0);
    assert_eq!(floats("log(2, f)")[2], None);
    assert_eq!(floats("sqrt(NULL)"), [None; 4]);
}

#[test]
fn sign_keeps_the_argument_type() {
    assert_eq!(ints("sign(i)"), [Some(1), Some(-1), None, Some(1)]);
    assert_eq!(ints("sign(0)"), [Some(0); 4]);
    assert_eq!(floats("SIGN(f)"), [Some(1.0), Some(-1.0), None, Some(1.0)]);
}

#[test]
fn trigonometry_and_constants() {
    assert_eq!(float("sin(0)"), 0.0);
    assert_eq!(float("cos(0)"), 1.0);
    assert_eq!(float("atan2(1, 1)"), std::f64::consts::FRAC_PI_4);
    assert_eq!(float("degrees(pi())"), 180.0);
    assert_eq!(float("radians(180)"), std::f64::consts::PI);
    assert_eq!(float("tanh(0)"), 0.0);
    // Values from Python's math module.
    assert_eq!(float("tan(1)"), 1.5574077246549023);
    assert_eq!(float("cot(1)"), 0.6420926159343306);
    assert_eq!(float("asin(1)"), std::f64::consts::FRAC_PI_2);
    assert_eq!(float("acos(1)"), 0.0);
    assert_eq!(float("atan(1)"), std::f64::consts::FRAC_PI_4);
    assert_eq!(float("sinh(1)"), 1.1752011936438014);
    assert_eq!(float("cosh(1)"), 1.5430806348152437);
    assert_eq!(floats("sin(f)")[2], None);
    assert_eq!(float("e()"), std::f64::consts::E);
}

#[test]
fn bin_and_hex_write_integers_and_strings() {
    // Flink: "4.bin() returns "100" and 12.bin() returns "1100"".
    assert_eq!(strs("bin(4)")[0].as_deref(), Some("100"));
    assert_eq!(strs("bin(12)")[0].as_deref(), Some("1100"));
    // "a numeric 20 leads to "14", a numeric 100 leads to "64", a string "hello,world" leads
    // to "68656C6C6F2C776F726C64"".
    assert_eq!(strs("hex(20)")[0].as_deref(), Some("14"));
    assert_eq!(strs("hex(100)")[0].as_deref(), Some("64"));
    assert_eq!(
        strs("hex('hello,world')")[0].as_deref(),
        Some("68656C6C6F2C776F726C64")
    );
    // Java's Long.toHexString: two's complement.
    assert_eq!(strs("hex(-1)")[0].as_deref(), Some("FFFFFFFFFFFFFFFF"));
    assert_eq!(strs("hex(i)")[2], None);
}

#[test]
fn numeric_functions_refuse_wrong_types_and_arities() {
    let message = compile_error("power(s, 2)").to_string();
    assert!(message.contains("power needs an INT or FLOAT"), "{message}");
    assert_eq!(
        compile_error("sqrt(1, 2)").to_string(),
        "sqrt takes 1 argument, got 2: sqrt(x)"
    );
    let message = compile_error("truncate(f, i)").to_string();
    assert!(message.contains("constant INT"), "{message}");
    let message = compile_error("bin(f)").to_string();
    assert!(message.contains("bin needs an INT"), "{message}");
    assert!(matches!(compile_error("pi(1)"), ExprError::Type { .. }));
}
