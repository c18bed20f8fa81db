//! A run's counters in JSON as one object, `{"pgfault": 3, ...}`, in their
//! order; the `[name, value]` pairs written before are read too.

use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use std::fmt;

/// Writes `counters` as an object.
pub fn serialize<S: Serializer>(counters: &[(String, u64)], s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(counters.len()))?;
    for (name, value) in counters {
        map.serialize_entry(name, value)?;
    }
    map.end()
}

/// Reads counters from an object, or from pairs.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, u64)>, D::Error> {
    struct Counters;
    impl<'de> Visitor<'de> for Counters {
        type Value = Vec<(String, u64)>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("counters as an object of numbers, or as [name, number] pairs")
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
    d.deserialize_any(Counters)
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
