-- Nexmark q3: Local item suggestion: auctions of category 10 by sellers in three states.
SELECT p.name, p.city, p.state, a.id
FROM auction AS a INNER JOIN person AS p ON a.seller = p.id
WHERE a.category = 10 AND (p.state = 'or' OR p.state = 'id' OR p.state = 'ca')
