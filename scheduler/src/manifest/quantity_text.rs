//! A deserializer adaptor that hands every `Quantity` the YAML text exactly as written.
//!
//! k8s-openapi's `Quantity` deserializes through `deserialize_any`, so a plain YAML scalar
//! such as `1e400` or `99999999999999999999` first becomes an `f64` and reaches us as `inf`
//! or `100000000000000000000`: the number the user wrote is lost before phalanx's exact
//! parser ever sees it. [`QuantityText`] wraps a deserializer (and, recursively, every
//! nested one) and answers `deserialize_newtype_struct("Quantity", ..)` with
//! `deserialize_string`, which serde-saphyr serves with the scalar's source text.
//!
//! The same adaptor notes every field the typed read skips ([`Skipped`]): serde and
//! k8s-openapi drop an unknown field (`minMembr: 3`) through `deserialize_ignored_any`
//! without a word, so the adaptor keeps the path it is at (map keys and list indices), and
//! answers `deserialize_ignored_any` by reading the value for a message before it is
//! dropped. The loader turns what it noted into warnings, or errors in strict mode, as
//! kubectl's field validation does.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

/// The name k8s-openapi gives its quantity newtype.
const QUANTITY: &str = "Quantity";

/// A field the typed read did not know: where it is and its value, shortened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SkippedField {
    /// `spec.tasks[0].minAvalable`, as serde_path_to_error writes paths.
    pub path: String,
    pub value: String,
    /// The fields the enclosing object does have, for a "did you mean".
    pub known: &'static [&'static str],
}

/// What one typed read skipped, and where the read is now.
#[derive(Debug, Default)]
pub(crate) struct Skipped {
    /// Map keys and `[index]` segments from the document's root to the current value.
    path: RefCell<Vec<String>>,
    /// The key just read, until its value is read.
    key: RefCell<Option<String>>,
    reading_key: Cell<bool>,
    /// The field lists of the structs being read, innermost last.
    structs: RefCell<Vec<&'static [&'static str]>>,
    found: RefCell<Vec<SkippedField>>,
}

impl Skipped {
    /// What was skipped, in document order.
    pub fn take(&self) -> Vec<SkippedField> {
        self.found.take()
    }

    fn note_key(&self, key: &str) {
        if self.reading_key.replace(false) {
            *self.key.borrow_mut() = Some(key.to_string());
        }
    }

    fn record(&self, value: String) {
        let mut path = String::new();
        for segment in self.path.borrow().iter() {
            if !path.is_empty() && !segment.starts_with('[') {
                path.push('.');
            }
            path.push_str(segment);
        }
        let known = self.structs.borrow().last().copied().unwrap_or(&[]);
        self.found
            .borrow_mut()
            .push(SkippedField { path, value, known });
    }

    /// Runs `read` with `segment` on the path.
    fn under<R>(&self, segment: String, read: impl FnOnce() -> R) -> R {
        self.path.borrow_mut().push(segment);
        let result = read();
        self.path.borrow_mut().pop();
        result
    }
}

/// Wraps a deserializer so that quantities are read as text and skipped fields noted.
#[derive(Debug)]
pub(crate) struct QuantityText<D>(pub D, pub Rc<Skipped>);

macro_rules! forward_plain {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.0.$method(Wrap(visitor, self.1))
            }
        )*
    };
}

/// Integers are read through `deserialize_any`, which tells `3` from `"3"`: serde-saphyr
/// reads a quoted `"3"` as the integer 3 when asked for one, where the API server (and
/// Go's YAML) refuse text in an integer field, so a scenario that loads here would be
/// refused by a real cluster.
macro_rules! forward_integer {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.0.deserialize_any(NotText(Wrap(visitor, self.1)))
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for QuantityText<D> {
    type Error = D::Error;

    forward_plain!(
        deserialize_any,
        deserialize_bool,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
    );

    forward_integer!(
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
    );

    /// Reads the skipped value for the message, then hands the caller its nothing.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        let value = self.0.deserialize_any(Render)?;
        self.1.record(value);
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_unit_struct(name, Wrap(visitor, self.1))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        if name == QUANTITY {
            self.0.deserialize_string(Wrap(visitor, self.1))
        } else {
            self.0
                .deserialize_newtype_struct(name, Wrap(visitor, self.1))
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_tuple(len, Wrap(visitor, self.1))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0
            .deserialize_tuple_struct(name, len, Wrap(visitor, self.1))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.1.structs.borrow_mut().push(fields);
        let skipped = Rc::clone(&self.1);
        let result = self
            .0
            .deserialize_struct(name, fields, Wrap(visitor, self.1));
        skipped.structs.borrow_mut().pop();
        result
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0
            .deserialize_enum(name, variants, Wrap(visitor, self.1))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// A visitor (or map access, seed, ...) whose nested deserializers are wrapped again.
struct Wrap<V>(V, Rc<Skipped>);

macro_rules! forward_visit {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
                self.0.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.expecting(f)
    }

    forward_visit!(
        visit_bool: bool,
        visit_i8: i8,
        visit_i16: i16,
        visit_i32: i32,
        visit_i64: i64,
        visit_i128: i128,
        visit_u8: u8,
        visit_u16: u16,
        visit_u32: u32,
        visit_u64: u64,
        visit_u128: u128,
        visit_f32: f32,
        visit_f64: f64,
        visit_char: char,
        visit_bytes: &[u8],
        visit_borrowed_bytes: &'de [u8],
        visit_byte_buf: Vec<u8>,
    );

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.1.note_key(v);
        self.0.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        self.1.note_key(v);
        self.0.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        self.1.note_key(&v);
        self.0.visit_string(v)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.visit_some(QuantityText(d, self.1))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.visit_newtype_struct(QuantityText(d, self.1))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.0.visit_seq(Indexed {
            seq,
            skipped: self.1,
            next: 0,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.visit_map(Wrap(map, self.1))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.0.visit_enum(Wrap(data, self.1))
    }
}

/// An integer's visitor that refuses text (see `forward_integer`); everything else goes to
/// the integer's own visitor, which checks the range.
struct NotText<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for NotText<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an integer written as a number, not text (remove the quotes)")
    }

    forward_visit!(
        visit_bool: bool,
        visit_i8: i8,
        visit_i16: i16,
        visit_i32: i32,
        visit_i64: i64,
        visit_i128: i128,
        visit_u8: u8,
        visit_u16: u16,
        visit_u32: u32,
        visit_u64: u64,
        visit_u128: u128,
        visit_f32: f32,
        visit_f64: f64,
        visit_char: char,
        visit_bytes: &[u8],
        visit_borrowed_bytes: &'de [u8],
        visit_byte_buf: Vec<u8>,
    );

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Err(E::invalid_type(de::Unexpected::Str(v), &self))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_unit()
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.visit_some(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.0.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.visit_map(map)
    }
}

/// A list whose elements put their index on the path.
struct Indexed<A> {
    seq: A,
    skipped: Rc<Skipped>,
    next: usize,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Indexed<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        let segment = format!("[{}]", self.next);
        self.next += 1;
        let skipped = Rc::clone(&self.skipped);
        let seq = &mut self.seq;
        skipped.under(segment, || {
            seq.next_element_seed(Wrap(seed, Rc::clone(&skipped)))
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.seq.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.1.reading_key.set(true);
        let key = self.0.next_key_seed(Wrap(seed, Rc::clone(&self.1)));
        self.1.reading_key.set(false);
        key
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        let key = self.1.key.take().unwrap_or_else(|| "?".to_string());
        let skipped = Rc::clone(&self.1);
        let map = &mut self.0;
        skipped.under(key, || map.next_value_seed(Wrap(seed, Rc::clone(&skipped))))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Wrap<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(QuantityText(d, self.1))
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<A> {
    type Error = A::Error;
    type Variant = Wrap<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let (value, variant) = self.0.variant_seed(Wrap(seed, Rc::clone(&self.1)))?;
        Ok((value, Wrap(variant, self.1)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        self.0.newtype_variant_seed(Wrap(seed, self.1))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Wrap(visitor, self.1))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.struct_variant(fields, Wrap(visitor, self.1))
    }
}

/// A skipped value in a few words: a scalar as written (shortened), a mapping or a list by
/// its size. Nested values are drained unread: only the outermost unknown field is named.
struct Render;

/// Longest scalar quoted in a message.
const MAX_RENDERED_CHARS: usize = 40;

fn shortened(text: &str) -> String {
    let mut shown: String = text.chars().take(MAX_RENDERED_CHARS).collect();
    if text.chars().count() > MAX_RENDERED_CHARS {
        shown.push_str("...");
    }
    format!("{shown:?}")
}

impl<'de> Visitor<'de> for Render {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(shortened(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        Ok("null".to_string())
    }

    fn visit_none<E: de::Error>(self) -> Result<String, E> {
        Ok("null".to_string())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(Render)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<String, A::Error> {
        let mut items = 0;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            items += 1;
        }
        Ok(format!("a list of {items} items"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
        let mut entries = 0;
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
            entries += 1;
        }
        Ok(format!("a mapping of {entries} entries"))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<String, A::Error> {
        // Drained as serde's own IgnoredAny drains it.
        data.variant::<IgnoredAny>()?
            .1
            .newtype_variant::<IgnoredAny>()?;
        Ok("a tagged value".to_string())
    }
}
