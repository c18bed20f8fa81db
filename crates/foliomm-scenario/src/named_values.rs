//! Named values (a run's counters, a benchmark row's published figures)
//! in JSON as one object, `{"pgfault": 3, ...}`, in their order, for
//! `#[serde(with = "named_values")]` on a `Vec<(String, V)>`; the
//! `[name, value]` pairs written before are read too.

use serde::de::{DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use std::fmt;
use std::marker::PhantomData;

/// Writes `values` as an object.
pub fn serialize<S: Serializer, V: Serialize>(values: &[(String, V)], s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(values.len()))?;
    for (name, value) in values {
        map.serialize_entry(name, value)?;
    }
    map.end()
}

/// Reads named values from an object, or from pairs.
pub fn deserialize<'de, D: Deserializer<'de>, V: DeserializeOwned>(d: D) -> Result<Vec<(String, V)>, D::Error> {
    struct Named<V>(PhantomData<V>);
    impl<'de, V: DeserializeOwned> Visitor<'de> for Named<V> {
        type Value = Vec<(String, V)>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object of named values, or [name, value] pairs")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(entry) = map.next_entry()? {
                out.push(entry);
            }
            Ok(out)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(pair) = seq.next_element()? {
                out.push(pair);
            }
            Ok(out)
        }
    }
    d.deserialize_any(Named(PhantomData))
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Run {
        #[serde(with = "super")]
        counters: Vec<(String, u64)>,
    }

    #[test]
    fn counters_are_an_object_in_order_and_old_pairs_still_read() {
        let run = Run { counters: vec![("pgfault".into(), 3), ("cow_copy".into(), 1)] };
        let text = serde_json::to_string(&run).unwrap();
        assert_eq!(text, r#"{"counters":{"pgfault":3,"cow_copy":1}}"#);
        let back: Run = serde_json::from_str(&text).unwrap();
        assert_eq!(back.counters, run.counters);
        let old: Run = serde_json::from_str(r#"{"counters":[["pgfault",3],["cow_copy",1]]}"#).unwrap();
        assert_eq!(old.counters, run.counters);
        assert!(serde_json::from_str::<Run>(r#"{"counters":3}"#).is_err());
    }
}
